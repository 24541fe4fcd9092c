"""`fluksio artifact get RUN OUTPUT`, `cancel` and `resume` on the embedded default, driven in this process as a
user at a terminal drives them: files by an output's name, a cancel that had nothing to cancel, a resume whose
advice is one it takes, statuses said as words."""

from __future__ import annotations

import logging
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fluksio import Artifact, RunStatus, Settings, connect
from fluksio.cli.main import cli
from fluksio.outage import LOGGER

FILES_FLOW = """
    from fluksio import Artifact, Flow

    flow = Flow("files", inputs={"n": int}, outputs=["report", "parts", "count"])

    @flow.node(provides="report")
    def write_report(n: int) -> Artifact:
        return Artifact.from_bytes(b"report " * n, name="report.txt")

    @flow.node(provides="shards")
    def split(n: int) -> list[int]:
        return list(range(n))

    @flow.node(provides="parts", map={"i": "shards"})
    def part(i: int) -> Artifact:
        return Artifact.from_bytes(f"part {i}".encode(), name=f"part{i}.txt")

    @flow.node(provides="count")
    def count(parts: list) -> int:
        return len(parts)
"""

#: A flow whose node fails until the file MARK exists next to it.
FLAKY_FLOW = """
    from pathlib import Path

    from fluksio import Flow

    flow = Flow("flaky", outputs=["x"])

    @flow.node(provides="x")
    def step() -> int:
        if not (Path(__file__).parent / "MARK").exists():
            raise RuntimeError("not yet")
        return 1
"""


@pytest.fixture
def terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forget_imported_flow_files: None) -> Iterator[Settings]:
    """The embedded installation a command in ``tmp_path`` uses, and its settings for a client here."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLUKSIO_DATABASE_URL", f"sqlite:///{tmp_path / 'runs.db'}")
    monkeypatch.setenv("FLUKSIO_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    monkeypatch.setenv("FLUKSIO_CPUS", "2")
    outage = logging.getLogger(LOGGER)  # commands show outage notices on the terminal: not after this test
    monkeypatch.setattr(outage, "handlers", list(outage.handlers))
    monkeypatch.setattr(outage, "level", outage.level)
    yield Settings(database_url=f"sqlite:///{tmp_path / 'runs.db'}", artifacts_dir=tmp_path / "artifacts", cpus=2)


def fluksio(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def flow_file(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def files_run(terminal: Settings, tmp_path: Path) -> str:
    with connect(terminal) as client:
        record = client.submit(f"{flow_file(tmp_path, 'files.py', FILES_FLOW)}:flow", {"n": 3}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    return record.id


# -- fluksio artifact get RUN OUTPUT ---------------------------------------------------------------------------


def test_an_output_file_is_got_by_its_name_and_an_element_by_its_index(files_run: str, tmp_path: Path) -> None:
    got = fluksio("artifact", "get", files_run, "report", "-o", "report.txt")
    assert got.exit_code == 0, got.output
    assert (tmp_path / "report.txt").read_bytes() == b"report " * 3
    element = fluksio("artifact", "get", files_run[:14], "parts[1]", "-o", "part.txt")  # a run id's prefix will do
    assert element.exit_code == 0, element.output
    assert (tmp_path / "part.txt").read_bytes() == b"part 1"


@pytest.mark.parametrize(("output", "said"), [
    ("reprot", "made no output 'reprot'; the outputs it did make: count, parts, report, shards; did you mean "
               "'report'?"),
    ("parts", "output 'parts' of run {run} is a list of 3 files (one per element of a mapped node); name one: "
              "parts[0] to parts[2]"),
    ("parts[3]", "output 'parts' of run {run} has 3 element(s), [0] to [2]; there is no [3]"),
    ("report[0]", "output 'report' of run {run} is not a list (a mapped node's), so it has no element [0]"),
    ("count", "output 'count' of run {run} is a JSON value, not a file (3); `fluksio show {run}` prints it, and "
              "client.output('{run}', 'count') returns it"),
    ("count)", "'count)' is not an output's name; write NAME, or NAME[I]"),
])
def test_an_output_that_is_no_file_is_refused_in_one_line_saying_why(files_run: str, tmp_path: Path, output: str,
                                                                      said: str) -> None:
    refused = fluksio("artifact", "get", files_run, output, "-o", "x.bin")
    assert refused.exit_code == 2, refused.output
    assert said.format(run=files_run) in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert not (tmp_path / "x.bin").exists()


def test_a_run_id_alone_is_asked_for_its_output(files_run: str) -> None:
    refused = fluksio("artifact", "get", files_run, "-o", "x.bin")
    assert refused.exit_code == 2
    assert f"for an output of a run, name the output too: fluksio artifact get {files_run} OUTPUT -o FILE" in (
        refused.stderr)


def test_client_output_gives_a_file_output_by_name(files_run: str, terminal: Settings) -> None:
    with connect(terminal) as client:
        report = client.output(files_run, "report")
        assert isinstance(report, Artifact) and report.read_bytes() == b"report " * 3


# -- fluksio cancel ----------------------------------------------------------------------------------------------


def test_cancel_of_a_finished_run_says_it_had_finished_and_exits_non_zero(files_run: str, terminal: Settings) -> None:
    done = fluksio("cancel", files_run)
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr == f"error: run {files_run} had already finished: ok; nothing to cancel\n"
    with connect(terminal) as client:
        assert client.get(files_run).status is RunStatus.OK


# -- fluksio resume ----------------------------------------------------------------------------------------------


def test_resume_advises_what_it_accepts_and_says_the_status_as_a_word(terminal: Settings, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    flaky = flow_file(tmp_path, "flaky.py", FLAKY_FLOW)
    failed = fluksio("run", f"{flaky}:flow", "--json")
    assert failed.exit_code == 1, failed.output
    run_id = re.search(r'"id": "(\w+)"', failed.stdout)[1]  # type: ignore[index]

    advised = fluksio("resume", run_id)
    assert advised.exit_code == 2, advised.output
    advice = re.search(r"\((FLUKSIO_FLOWS=\S+) fluksio resume (\w+)\)$", advised.stderr.strip())
    assert advice is not None, advised.stderr
    assert advice[1] == f"FLUKSIO_FLOWS={flaky}:flow" and advice[2] == run_id

    (tmp_path / "MARK").touch()
    monkeypatch.setenv(*advice[1].split("=", 1))  # the advice, taken as given
    resumed = fluksio("resume", run_id)
    assert resumed.exit_code == 0, resumed.output
    assert f"run {run_id} resumed from error" in resumed.stderr and "RunStatus" not in resumed.output
