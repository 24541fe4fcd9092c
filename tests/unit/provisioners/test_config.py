"""config/provisioners.json: every bad file is refused with a message naming the file, profile and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluksio.errors import ConfigError
from fluksio.provisioners.config import (
    DEFAULT_PATH,
    SlurmProfile,
    load_profiles,
    profiles_path,
)
from fluksio.schemas import Resources

REPO = Path(__file__).resolve().parents[3]

GOOD = {
    "name": "cpu-small", "kind": "slurm", "host": "", "partition": "debug", "account": "proj1",
    "cpus": 4, "gpus": 0, "ram_mb": 8000, "labels": ["cluster", "cpu"], "time_limit": "2:00:00",
    "prerun": ["module load python/3.11", "source ~/venvs/fluksio/bin/activate"],
    "attach_timeout_s": 600, "idle_timeout_s": 300, "sbatch_args": ["--qos=short"],
}


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "provisioners.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def refused(tmp_path: Path, data: object) -> str:
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        load_profiles(path)
    message = str(caught.value)
    assert str(path) in message  # every complaint names the file
    return message


def with_(**changes: object) -> dict:
    return {**GOOD, **changes}


def test_a_good_file_loads_every_field(tmp_path: Path) -> None:
    [profile] = load_profiles(write(tmp_path, [GOOD]))
    assert profile == SlurmProfile(
        name="cpu-small", kind="slurm", partition="debug", account="proj1", cpus=4, ram_mb=8000,
        labels=("cluster", "cpu"), time_limit="2:00:00",
        prerun=("module load python/3.11", "source ~/venvs/fluksio/bin/activate"),
        attach_timeout_s=600, idle_timeout_s=300, sbatch_args=("--qos=short",),
    )
    assert profile.shape == Resources(cpus=4, gpus=0, ram_mb=8000)
    assert profile.machine_name("123") == "slurm-cpu-small-123"


def test_only_name_and_kind_are_required(tmp_path: Path) -> None:
    [profile] = load_profiles(write(tmp_path, [{"name": "p", "kind": "slurm"}]))
    assert (profile.host, profile.cpus, profile.gpus, profile.ram_mb, profile.labels) == ("", 1, 0, 0, ())
    assert profile.attach_timeout_s > 0 and profile.idle_timeout_s > 0


def test_an_empty_list_means_no_profiles(tmp_path: Path) -> None:
    assert load_profiles(write(tmp_path, [])) == []


def test_the_example_file_in_the_repository_is_valid() -> None:
    profiles = load_profiles(REPO / "config" / "provisioners.example.json")
    assert profiles and all(p.kind == "slurm" for p in profiles)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read provisioner profiles .*nope.json: No such file"):
        load_profiles(tmp_path / "nope.json")


def test_a_file_that_is_not_json(tmp_path: Path) -> None:
    message = refused(tmp_path, '[{"name": "a", "kind": "slurm",}]')
    assert "is not valid JSON" in message and "line 1 column" in message


def test_a_file_that_is_not_a_list(tmp_path: Path) -> None:
    assert "must be a JSON list of profiles" in refused(tmp_path, {"profiles": [GOOD]})


def test_an_entry_that_is_not_an_object(tmp_path: Path) -> None:
    assert "profile 1: must be an object, got str" in refused(tmp_path, [GOOD, "cpu"])


@pytest.mark.parametrize(("field", "value", "says"), [
    ("name", "has space", "name: 'has space' is not usable in a worker name"),
    ("name", "a.b", "is not usable in a worker name"),
    ("name", "-lead", "is not usable in a worker name"),
    ("name", "x" * 49, "is not usable in a worker name"),
    ("kind", "pbs", "kind: 'pbs' is not a provisioner kind; the only kind is 'slurm'"),
    ("host", "-oProxyCommand=evil", "host: '-oProxyCommand=evil' is not an ssh destination"),
    ("host", "login 1", "is not an ssh destination"),
    ("partition", "gpu; rm", "partition: 'gpu; rm' is not a Slurm name"),
    ("account", "a b", "account: 'a b' is not a Slurm name"),
    ("cpus", 0, "cpus: Input should be greater than or equal to 1 (got 0)"),
    ("cpus", "4", 'cpus: Input should be a valid integer (got "4")'),
    ("cpus", 2.5, "cpus: Input should be a valid integer"),
    ("gpus", -1, "gpus: Input should be greater than or equal to 0"),
    ("gpus", True, "gpus: Input should be a valid integer (got true)"),
    ("ram_mb", -5, "ram_mb: Input should be greater than or equal to 0"),
    ("labels", "cluster", "labels: Input should be a valid array"),
    ("labels", ["two words"], "labels: 'two words' is not a label; labels are words"),
    ("labels", ["default"], "labels: 'default' is reserved"),
    ("labels", [3], "labels.0: Input should be a valid string"),
    ("time_limit", "2h", "time_limit: '2h' is not a Slurm time"),
    ("time_limit", "1:2:3:4", "is not a Slurm time"),
    ("prerun", "module load x", "prerun: Input should be a valid array"),
    ("prerun", ["a\nb"], "prerun: 'a\\nb' spans several lines; give one entry per line"),
    ("attach_timeout_s", 0, "attach_timeout_s: Input should be greater than 0"),
    ("idle_timeout_s", -1, "idle_timeout_s: Input should be greater than 0"),
    ("idle_timeout_s", "5m", "idle_timeout_s: Input should be a valid number"),
    ("sbatch_args", ["qos=short"], "sbatch_args: 'qos=short' is not an sbatch option"),
    ("sbatch_args", "--hold", "sbatch_args: Input should be a valid array"),
    ("output", "my out.txt", "output: 'my out.txt' is not a file name sbatch reads"),
])
def test_a_bad_field_is_named_with_its_profile(tmp_path: Path, field: str, value: object, says: str) -> None:
    message = refused(tmp_path, [{"name": "ok", "kind": "slurm"}, with_(**{field: value})])
    name = value if field == "name" else GOOD["name"]
    assert f"profile 1 ({name!r}): {field}" in message and says in message, message
    assert "profile 0" not in message  # the good profile is not blamed


def test_a_missing_required_field(tmp_path: Path) -> None:
    message = refused(tmp_path, [{"kind": "slurm"}, {"name": "b"}])
    assert "profile 0: name: required" in message
    assert "profile 1 ('b'): kind: required" in message


def test_an_unknown_field_gets_a_suggestion_and_the_known_fields(tmp_path: Path) -> None:
    message = refused(tmp_path, [with_(cpu=4)])
    assert "profile 0 ('cpu-small'): cpu: unknown field; did you mean 'cpus'?" in message
    assert "known fields: name, kind, host, partition, account, cpus" in message


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, [GOOD, with_(cpus=8), {"name": "other", "kind": "slurm"}])
    assert "profile 1 ('cpu-small'): name: profile 0 has the same name; names must be unique" in message


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    message = refused(tmp_path, [with_(cpus=0, labels=["a b"]), with_(name="two", time_limit="soon")])
    assert message.count("; ") >= 2
    assert "profile 0 ('cpu-small'): cpus" in message and "profile 0 ('cpu-small'): labels" in message
    assert "profile 1 ('two'): time_limit" in message


@pytest.mark.parametrize("limit", ["30", "30:00", "2:00:00", "1-0", "1-12", "1-12:30", "1-12:30:00",
                                   "UNLIMITED", "INFINITE"])
def test_slurm_time_formats_are_accepted(tmp_path: Path, limit: str) -> None:
    assert load_profiles(write(tmp_path, [with_(time_limit=limit)]))[0].time_limit == limit


def test_ssh_destinations_are_accepted(tmp_path: Path) -> None:
    for host in ("login1", "me@login.cluster.example.org", "login-alias_2"):
        assert load_profiles(write(tmp_path, [with_(host=host)]))[0].host == host


def test_the_default_path_is_used_only_when_present(tmp_path: Path) -> None:
    assert profiles_path(None, cwd=tmp_path) is None
    (tmp_path / DEFAULT_PATH).parent.mkdir(parents=True)
    (tmp_path / DEFAULT_PATH).write_text("[]")
    assert profiles_path(None, cwd=tmp_path) == tmp_path / DEFAULT_PATH
    assert profiles_path(Path("/etc/fluksio/p.json"), cwd=tmp_path) == Path("/etc/fluksio/p.json")
