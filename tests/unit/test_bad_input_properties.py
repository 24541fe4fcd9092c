"""Property tests: whatever is thrown at a public entry, the answer is a result or a FluksioError with a
readable message — never a traceback from deep inside, never a half-written row."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluksio import Artifact, Flow
from fluksio.artifacts.local import LocalArtifactStore
from fluksio.cli.params import parse_grid, parse_params, parse_seeds
from fluksio.errors import FluksioError
from fluksio.flows.registry import FlowRegistry
from fluksio.runs.submit import submit_run
from fluksio.settings import load_settings
from fluksio.store.db import Database
from fluksio.store.run_rows import list_runs
from tests.conftest import Compass

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def readable(error: FluksioError) -> None:
    message = str(error)
    assert message and "Traceback" not in message and len(message) < 2_000


@pytest.fixture(scope="module")
def store() -> tuple[Database, FlowRegistry, LocalArtifactStore, Flow]:
    folder = Path(tempfile.mkdtemp(prefix="fluksio-props-"))
    db = Database(f"sqlite:///{folder / 'runs.db'}")
    db.upgrade()
    flow = Flow("target", inputs={"lr": float, "epochs": (int, 3), "name": (str, "x"), "blob": (Artifact, None),
                                  "seed": int}, outputs=["out"])

    @flow.node(provides="out")
    def train(lr, epochs, name, seed):
        return lr

    return db, FlowRegistry(), LocalArtifactStore(folder / "artifacts"), flow


@PROPERTY
@given(params=st.dictionaries(st.sampled_from(["lr", "epochs", "name", "seed", "blob", "bogus", ""]) | st.text(),
                              json_values | st.sampled_from(["@run:01ABC.out", "sha256:" + "a" * 64, "@run:",
                                                             "sha256:x"]),
                              max_size=5),
       seed=st.none() | st.integers() | st.booleans(), key=st.none() | st.text(max_size=210))
def test_submit_gives_a_run_or_a_readable_rejection_and_never_half_a_row(store, compass: Compass, params, seed,
                                                                          key) -> None:
    db, registry, artifacts, flow = store
    compass.add("bad inputs tried")
    before = len(list_runs(db, limit=100_000))
    try:
        run, created = submit_run(db, registry, artifacts, flow, engine="embedded", params=params, seed=seed,
                                  idempotency_key=key)
    except FluksioError as error:
        readable(error)
        assert len(list_runs(db, limit=100_000)) == before
        return
    assert run.status == "queued" and isinstance(run.params["lr"], float)
    assert len(list_runs(db, limit=100_000)) == before + (1 if created else 0)


identifiers = st.sampled_from(["a", "b", "c", "x", "out", "seed"]) | st.text(max_size=6)


@PROPERTY
@given(name=st.text(max_size=12), nodes=st.lists(
    st.tuples(identifiers, st.lists(identifiers, max_size=3), st.lists(identifiers, max_size=2)), max_size=4),
    outputs=st.none() | st.lists(identifiers, max_size=3))
def test_flow_definitions_are_valid_or_a_flow_error(compass: Compass, name, nodes, outputs) -> None:
    compass.add("bad inputs tried")
    try:
        flow = Flow(name, inputs={"seed": int}, outputs=outputs)
        for node_name, requires, provides in nodes:
            arguments = ", ".join(f"p{i}" for i in range(len(requires)))
            namespace: dict = {}
            exec(f"def f({arguments}):\n    return None", namespace)  # noqa: S102 - a function of that arity
            flow.node(namespace["f"], name=node_name, requires=requires, provides=provides)
        flow.validate()
    except FluksioError as error:
        readable(error)


@PROPERTY
@given(items=st.lists(st.text(max_size=15), max_size=4))
def test_cli_parameters_parse_or_say_what_is_wrong(compass: Compass, items) -> None:
    compass.add("bad inputs tried", 3)
    for parse in (parse_params, parse_grid):
        try:
            parse(tuple(items))
        except click.BadParameter as error:
            assert error.message
    try:
        parse_seeds(",".join(items))
    except click.BadParameter as error:
        assert "whole numbers" in error.message


toml_values = st.integers() | st.text(max_size=10) | st.booleans() | st.floats(allow_nan=False) | st.lists(
    st.text(max_size=5), max_size=3)


@PROPERTY
@given(entries=st.dictionaries(st.sampled_from(["broker_url", "database_url", "cpus", "flows", "labels",
                                                "lease_interval_s", "auto_resume", "brokr_url", "ram_mb"]),
                               toml_values, max_size=4), garbage=st.booleans())
def test_settings_files_load_or_raise_a_config_error(compass: Compass, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path_factory, entries, garbage) -> None:
    compass.add("bad inputs tried")
    path = tmp_path_factory.mktemp("toml") / "fluksio.toml"
    body = "".join(f"{key} = {json.dumps(value)}\n" for key, value in entries.items())
    path.write_text(body + ("[[[not toml\n" if garbage else ""))
    monkeypatch.setenv("FLUKSIO_CONFIG", str(path))
    try:
        load_settings()
    except FluksioError as error:
        readable(error)


profile_fields = st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=10) | st.integers(), "kind": st.sampled_from(["slurm", "k8s", ""]) | st.integers(),
    "host": st.text(max_size=10), "partition": st.text(max_size=6), "cpus": st.integers(-2, 64) | st.text(max_size=3),
    "gpus": st.integers(-1, 8), "ram_mb": st.integers(-5, 10**6), "labels": st.lists(st.text(max_size=6), max_size=3),
    "time_limit": st.text(max_size=9), "prerun": st.lists(st.text(max_size=12), max_size=2) | st.text(max_size=5),
    "attach_timeout_s": st.floats(allow_nan=True) | st.integers(), "idle_timeout_s": st.integers(-1, 100),
    "sbatch_args": st.lists(st.text(max_size=8), max_size=2), "surprise": st.booleans(),
})


@PROPERTY
@given(document=st.lists(profile_fields, max_size=3) | json_values, garbage=st.booleans())
def test_provisioner_files_load_or_raise_a_config_error(compass: Compass, tmp_path_factory, document,
                                                        garbage) -> None:
    from fluksio.provisioners import load_profiles

    compass.add("bad inputs tried")
    path = tmp_path_factory.mktemp("prov") / "provisioners.json"
    path.write_text(("{not json" if garbage else "") + json.dumps(document, allow_nan=True))
    try:
        profiles = load_profiles(path)
    except FluksioError as error:
        readable(error)
        assert str(path) in str(error)
        return
    assert all(p.kind == "slurm" and p.cpus >= 1 for p in profiles)
