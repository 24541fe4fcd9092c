"""The run cache keys each node on its own code, on the embedded default, as a user at a terminal edits a
project between runs: `fluksio run` (a process of its own each time, loading the files as they are) and
`fluksio show`.

The project: load → preprocess → train (mapped over alphas, through a helper in training.py) → evaluate
(which reads its metric by a computed name from metrics.py). Edit evaluate and only evaluate runs again; edit
the training helper and training runs again, and evaluate too only when training's outputs changed; edit an
unused function of metrics.py and evaluate, which reads metrics by a computed name, runs again, while
training, which calls one function of it by name, is restored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

FLUKSIO = [sys.executable, "-m", "fluksio.cli.main"]

FLOW = """
import numpy as np

from fluksio import Flow

import metrics
from training import fit_ridge

METRIC = "mse"

flow = Flow("ridge", inputs={"n": int, "alphas": list[float]}, outputs=["best"])


@flow.node(provides="raw")
def load(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(scale=0.1, size=n)
    return np.column_stack([X, y])


@flow.node(provides=["X", "y"])
def preprocess(raw: np.ndarray) -> dict:
    X, y = raw[:, :-1], raw[:, -1]
    return {"X": (X - X.mean(axis=0)) / X.std(axis=0), "y": y}


@flow.node(provides="models", map={"alpha": "alphas"})
def train(X: np.ndarray, y: np.ndarray, alpha: float) -> dict:
    w = fit_ridge(X, y, alpha)
    return {"alpha": alpha, "w": [float(v) for v in w], "loss": metrics.mse(X @ w, y)}


@flow.node(provides="best")
def evaluate(models: list, X: np.ndarray, y: np.ndarray) -> dict:
    score = getattr(metrics, METRIC)
    best = min(models, key=lambda m: score(X @ np.array(m["w"]), y))
    return {"alpha": best["alpha"], "score": score(X @ np.array(best["w"]), y)}
"""

TRAINING = """
import numpy as np


def fit_ridge(X, y, alpha):
    d = X.shape[1]
    return np.linalg.solve(X.T @ X + alpha * np.eye(d), X.T @ y)
"""

METRICS = """
import numpy as np


def mse(pred, y):
    return float(np.mean((pred - y) ** 2))


def mae(pred, y):
    return float(np.mean(np.abs(pred - y)))
"""


def fluksio(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env["COLUMNS"] = "200"
    return subprocess.run([*FLUKSIO, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def run(project: Path) -> dict[str, Any]:
    done = fluksio("run", "flow.py", "-p", "n=200", "-p", "alphas=[0.1, 1.0, 10.0]", "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["status"] == "ok", record["status_reason"]
    return record


def rows(record: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Each node's status and why it was not cached; a mapped node's elements folded when they agree."""
    found: dict[str, set[tuple[str, str | None]]] = {}
    for node in record["nodes"]:
        found.setdefault(node["node"], set()).add((node["status"], node["cache_miss"]))
    assert all(len(each) == 1 for each in found.values()), found
    return {node: next(iter(each)) for node, each in found.items()}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    for name, text in (("flow.py", FLOW), ("training.py", TRAINING), ("metrics.py", METRICS)):
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    return folder


def test_an_edit_runs_again_only_the_nodes_whose_code_or_inputs_changed(project: Path) -> None:
    first = run(project)
    assert rows(first) == {node: ("ok", f"no earlier call of `{node}` succeeded")
                           for node in ("load", "preprocess", "train", "evaluate")}
    assert len([n for n in first["nodes"] if n["node"] == "train"]) == 3

    again = run(project)
    assert rows(again) == {node: ("cached", None) for node in ("load", "preprocess", "train", "evaluate")}
    assert {n["cached_from"] for n in again["nodes"]} == {first["id"]}
    assert again["result"] == first["result"]

    # The evaluation node's body: it alone runs again.
    edit(project / "flow.py", "best = min(models, key=lambda m: score(X @ np.array(m[\"w\"]), y))",
         "best = sorted(models, key=lambda m: score(X @ np.array(m[\"w\"]), y))[0]")
    edited = run(project)
    assert rows(edited) == {"load": ("cached", None), "preprocess": ("cached", None), "train": ("cached", None),
                            "evaluate": ("ok", "code of `evaluate` changed")}
    assert edited["result"] == first["result"]

    # The training helper, written otherwise with the same results: training runs again, evaluation is
    # restored, its inputs being the same values.
    edit(project / "training.py", "alpha * np.eye(d)", "np.eye(d) * alpha")
    same = run(project)
    assert rows(same) == {"load": ("cached", None), "preprocess": ("cached", None),
                          "train": ("ok", "code of `train` changed"), "evaluate": ("cached", None)}

    # The training helper, changed: training runs again, and so does evaluation, whose inputs changed.
    edit(project / "training.py", "np.eye(d) * alpha", "np.eye(d) * alpha * 2")
    changed = run(project)
    assert rows(changed) == {"load": ("cached", None), "preprocess": ("cached", None),
                             "train": ("ok", "code of `train` changed"), "evaluate": ("ok", "inputs changed")}
    assert changed["result"] != first["result"]

    # A function nothing calls by name, in a module evaluation reads by a computed name (getattr): evaluation
    # counts all of metrics.py and runs again; training calls metrics.mse by name and is restored.
    edit(project / "metrics.py", "np.abs(pred - y)", "abs(pred - y)")
    dynamic = run(project)
    assert rows(dynamic) == {"load": ("cached", None), "preprocess": ("cached", None), "train": ("cached", None),
                             "evaluate": ("ok", "code of `evaluate` changed")}

    shown = fluksio("show", dynamic["id"], cwd=project)
    assert shown.returncode == 0, shown.stderr
    lines = [line.strip() for line in shown.stdout.splitlines()]
    at = lines.index("not from the cache:")
    assert lines[at + 1:at + 2] == ["evaluate: code of `evaluate` changed"]
    shown = fluksio("show", same["id"], cwd=project)
    assert "train: code of `train` changed (3 of 3 elements)" in [line.strip() for line in shown.stdout.splitlines()]
