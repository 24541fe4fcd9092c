"""Code packages on the embedded default: what a submit ships, what a run records, and getting the files back.

Real parts: the embedded installation (Celery on the memory transport, SQLite, a folder artifact store) in
this process, and a project folder of its own holding a flow, a helper module and a data file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from fluksio import Client, RunRejected, RunStatus, Settings, connect
from fluksio.artifacts.store import ArtifactStore
from fluksio.flows.package import pack

pytestmark = pytest.mark.integration

FLOW = """
from pathlib import Path

from fluksio import Flow

from helpers import scale

shipped = Flow("shipped", inputs={"x": int}, outputs=["y", "note"], include=["configs/*.txt"])


@shipped.node(provides="y")
def step(x):
    return scale(x)


@shipped.node(provides="note")
def read_config():
    return (Path(__file__).parent / "configs" / "note.txt").read_text().strip()
"""


def write_project(folder: Path, factor: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "flows.py").write_text(textwrap.dedent(FLOW))
    (folder / "helpers.py").write_text(f"FACTOR = {factor}\n\n\ndef scale(x):\n    return x * FACTOR\n")
    (folder / "configs").mkdir(exist_ok=True)
    (folder / "configs" / "note.txt").write_text("hello from the config\n")
    (folder / "notes.md").write_text("not imported, not included: never packed\n")
    return folder / "flows.py"


def load(path: Path, name: str) -> ModuleType:
    """The flow file imported as `fluksio run path.py:attr` would (its folder first on the path meanwhile)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop("helpers", None)  # another test's module of that name is not this project's
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
        sys.modules.pop("helpers", None)  # the next load reads the helper as it is then
    return module


@pytest.fixture
def project_client(tmp_path: Path) -> Iterator[tuple[Client, Path]]:
    client = connect(Settings(artifacts_dir=tmp_path / "store" / "artifacts", cpus=2, machine_name="local",
                              database_url=f"sqlite:///{tmp_path / 'store.db'}",
                              artifacts_cache=tmp_path / "store" / "artifacts-cache"))
    try:
        yield client, write_project(tmp_path / "project", factor=3)
    finally:
        client.close()


def artifacts_of(client: Client) -> ArtifactStore:
    return client._runtime.artifacts


def test_a_submit_ships_the_flow_its_helper_and_its_data_and_the_run_records_the_package(
        project_client: tuple[Client, Path], tmp_path: Path) -> None:
    client, flow_file = project_client
    flow = load(flow_file, "code_pkg_flows_a").shipped
    package = pack(str(flow_file), flow.include, flow.module)
    record = client.submit(flow, {"x": 2}).wait(timeout=60)
    assert record.status is RunStatus.OK, record.status_reason
    assert record.result == {"y": 6, "note": "hello from the config"}
    assert record.code_digest == package.digest == client._runtime.registry.digest(flow)
    assert record.code_entry == "flows.py"
    assert artifacts_of(client).get(package.digest) == package.data
    files = {f.path: f.size for f in client.code_files(record.id)}
    assert files == {"configs/note.txt": 22, "flows.py": len(textwrap.dedent(FLOW).encode()),
                     "helpers.py": (flow_file.parent / "helpers.py").stat().st_size}

    written = client.get_code(record.id, tmp_path / "got")
    assert sorted(f.path for f in written) == sorted(files)
    for path in files:
        assert (tmp_path / "got" / path).read_bytes() == (flow_file.parent / path).read_bytes()
    with pytest.raises(RunRejected, match="not an empty folder"):
        client.get_code(record.id, tmp_path / "got")


def test_a_second_submit_of_unchanged_code_stores_nothing(project_client: tuple[Client, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    client, flow_file = project_client
    flow = load(flow_file, "code_pkg_flows_b").shipped
    first = client.submit(flow, {"x": 1}).wait(timeout=60)
    assert first.status is RunStatus.OK, first.status_reason
    stored: list[str] = []
    store = artifacts_of(client)
    original_put = store.put
    monkeypatch.setattr(store, "put", lambda artifact: stored.append(artifact.digest) or original_put(artifact))
    second = client.submit(flow, {"x": 5}).wait(timeout=60)
    assert second.status is RunStatus.OK and second.result["y"] == 15
    assert second.code_digest == first.code_digest
    assert first.code_digest not in stored  # neither the package nor the graph's description again
    assert stored == [] or all(d != first.code_digest for d in stored)


def test_an_edited_helper_is_a_new_package_and_the_cache_keeps_the_two_apart(
        project_client: tuple[Client, Path]) -> None:
    client, flow_file = project_client
    old = load(flow_file, "code_pkg_flows_c").shipped
    first = client.submit(old, {"x": 2}).wait(timeout=60)
    (flow_file.parent / "helpers.py").write_text("FACTOR = 10\n\n\ndef scale(x):\n    return x * FACTOR\n")
    new = load(flow_file, "code_pkg_flows_d").shipped
    second = client.submit(new, {"x": 2}).wait(timeout=60)
    assert first.result["y"] == 6 and second.result["y"] == 20, (first.status_reason, second.status_reason)
    assert first.code_digest != second.code_digest
    assert all(n.cached_from is None for n in second.nodes if n.node == "step")


def test_a_package_over_the_size_limit_is_refused_at_submit_naming_its_largest_file(
        tmp_path: Path) -> None:
    flow_file = write_project(tmp_path / "project", factor=3)
    (flow_file.parent / "configs" / "big.txt").write_bytes(b"x" * 300_000)
    with connect(Settings(artifacts_dir=tmp_path / "artifacts", code_max_mb=0.2, machine_name="local",
                          database_url=f"sqlite:///{tmp_path / 'fluksio.db'}")) as client:
        flow = load(flow_file, "code_pkg_flows_e").shipped
        with pytest.raises(RunRejected) as refused:
            client.submit(flow, {"x": 1})
        message = str(refused.value)
        assert "over the 0.2 MB limit (FLUKSIO_CODE_MAX_MB)" in message
        assert "its largest files: configs/big.txt (" in message
        assert client.runs() == []  # nothing journaled


def test_an_earlier_package_runs_again_unchanged_with_code(project_client: tuple[Client, Path]) -> None:
    client, flow_file = project_client
    old = load(flow_file, "code_pkg_flows_f").shipped
    first = client.submit(old, {"x": 2}).wait(timeout=60)
    assert first.result["y"] == 6, first.status_reason
    (flow_file.parent / "helpers.py").write_text("FACTOR = 10\n\n\ndef scale(x):\n    return x * FACTOR\n")
    load(flow_file, "code_pkg_flows_g")  # this process now holds the new code too
    again = client.submit("shipped", {"x": 4}, code=first.code_digest, no_cache=True).wait(timeout=60)
    assert again.status is RunStatus.OK, again.status_reason
    assert again.code_digest == first.code_digest and again.result["y"] == 12  # FACTOR 3: the old package


def test_code_that_no_run_shipped_is_refused_saying_where_digests_are(project_client: tuple[Client, Path]) -> None:
    client, _ = project_client
    unknown = "sha256:" + hashlib.sha256(b"nothing").hexdigest()
    with pytest.raises(RunRejected, match="no run of flow 'shipped' shipped code package"):
        client.submit("shipped", {"x": 1}, code=unknown)
    with pytest.raises(RunRejected, match="is not a code package digest"):
        client.submit("shipped", {"x": 1}, code="main")
