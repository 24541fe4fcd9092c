"""A node's code identity (flows/node_code.py): what an edit of the project runs again, read statically.

Most tests build a project from file texts (``read_project``) and compare a node's identity before and after
one edit; the last ones load real flow files (the identity of a registered flow, a rebuilt one, one whose
files changed since it was loaded).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluksio import Flow
from fluksio.flows.manifest import describe, rebuild
from fluksio.flows.node_code import node_codes, read_project
from fluksio.flows.registry import load_flows

FLOW = "flow.py"
SKIPPED = {FLOW: {"flow"}}  # the flow object: what node_codes finds in the node's module


def project(files: dict[str, str]):  # type: ignore[no-untyped-def]
    return read_project({path: textwrap.dedent(text).lstrip().encode() for path, text in files.items()})


def identity(files: dict[str, str], node: str, path: str = FLOW) -> str:
    read = project(files)
    return read.identity(read.defined_at(path, node), SKIPPED)


def reached(files: dict[str, str], node: str, path: str = FLOW) -> list[str]:
    """The first line of each statement the node reaches, as ``module: line``."""
    read = project(files)
    return [f"{module}: {text.strip().splitlines()[0]}"
            for module, text in read.reached(read.defined_at(path, node), SKIPPED)]


def changes(files: dict[str, str], node: str, path: str, old: str, new: str) -> bool:
    """Whether replacing ``old`` by ``new`` in file ``path`` changes the node's identity."""
    assert old in files[path], (old, path)
    edited = {**files, path: files[path].replace(old, new)}
    return identity(files, node) != identity(edited, node)


BASE = {
    FLOW: """
        import numpy as np
        from fluksio import Flow
        import helpers
        from helpers import fit
        from config import RATE

        SIZE = 10
        DOUBLE = SIZE * 2
        flow = Flow("f")

        @flow.node(provides="data")
        def load():
            return list(range(DOUBLE))

        @flow.node(provides="model")
        def train(data):
            return fit(data, RATE)

        @flow.node(provides="score")
        def evaluate(model):
            return helpers.score(model) + np.float64(1)

        flow.subflow(child, name="sub")

        if __name__ == "__main__":
            print(flow)
    """,
    "helpers.py": """
        def fit(data, rate):
            return _inner(data) * rate

        def _inner(data):
            return sum(data)

        def score(model):
            return model

        def unused():
            return 0
    """,
    "config.py": """
        RATE = 0.1
        OTHER = 3
    """,
}


def test_a_node_reaches_its_helpers_and_constants_and_no_other_node():
    assert reached(BASE, "train") == [
        "config.py: RATE = 0.1", "flow.py: @flow.node(provides=\"model\")", "flow.py: from config import RATE",
        "flow.py: from helpers import fit", "helpers.py: def _inner(data):", "helpers.py: def fit(data, rate):"]
    assert reached(BASE, "load") == ["flow.py: @flow.node(provides=\"data\")", "flow.py: DOUBLE = SIZE * 2",
                                     "flow.py: SIZE = 10"]


@pytest.mark.parametrize(("path", "old", "new", "load", "train", "evaluate"), [
    (FLOW, "return fit(data, RATE)", "return fit(data, RATE) + 1", False, True, False),       # a node's body
    (FLOW, "helpers.score(model)", "helpers.score(model) * 2", False, False, True),
    ("helpers.py", "return sum(data)", "return sum(data) + 1", False, True, False),           # a helper's helper
    ("helpers.py", "return model", "return -model", False, False, True),                      # via helpers.score
    ("helpers.py", "return 0", "return 1", False, False, False),                              # nothing calls it
    ("config.py", "RATE = 0.1", "RATE = 0.2", False, True, False),                            # an imported constant
    ("config.py", "OTHER = 3", "OTHER = 4", False, False, False),
    (FLOW, "SIZE = 10", "SIZE = 11", True, False, False),                                     # a constant's constant
    (FLOW, "import numpy as np", "import numpy as numpy_", False, False, True),               # a library import line
    (FLOW, 'flow.subflow(child, name="sub")', 'flow.subflow(child, name="other")', False, False, False),
    (FLOW, "print(flow)", "print(flow, 1)", False, False, False),                             # the main block
    (FLOW, 'flow = Flow("f")', 'flow = Flow("g")', False, False, False),                      # the graph's own
])
def test_an_edit_changes_the_identity_of_the_nodes_that_reach_it_only(path, old, new, load, train, evaluate):
    assert [changes(BASE, node, path, old, new) for node in ("load", "train", "evaluate")] == [load, train, evaluate]


def test_comments_and_order_between_top_level_statements_change_nothing():
    moved = {**BASE, "helpers.py": """
        # helpers, reordered
        def score(model):
            return model


        def unused():
            return 0

        def _inner(data):
            return sum(data)

        def fit(data, rate):
            return _inner(data) * rate
    """}
    assert all(identity(BASE, node) == identity(moved, node) for node in ("load", "train", "evaluate"))


NESTED = {
    FLOW: """
        from fluksio import Flow
        from models import Net
        import registry
        import models  # registers its models

        LIMITS = {"depth": 2}
        LIMITS["width"] = 3
        flow = Flow("f")

        def make():
            def inner(x):
                return x + OFFSET
            return inner

        OFFSET = 1

        @flow.node(provides="n")
        def build(kind, scale=SCALE):
            from shapes import area
            return Net().forward(area(kind)) * scale

        SCALE = 2

        @flow.node(provides="limits")
        def limits():
            return LIMITS

        @flow.node(provides="model")
        def pick(kind):
            return registry.REGISTRY[kind]()

        def outer():
            @flow.node(provides="late")
            def late():
                return helper()
            return late

        def helper():
            return 4
    """,
    "models.py": """
        from registry import register

        class Base:
            def forward(self, x):
                return x

        class Net(Base):
            def forward(self, x):
                return super().forward(x) * 2

            def other(self):
                return 0

        @register
        def small():
            return 1
    """,
    "registry.py": """
        REGISTRY = {}

        def register(fn):
            REGISTRY[fn.__name__] = fn
            return fn
    """,
    "shapes.py": """
        def area(kind):
            return len(kind)

        def volume(kind):
            return 0
    """,
}


@pytest.mark.parametrize(("node", "path", "old", "new", "changed"), [
    ("build", "models.py", "return x\n", "return x + 0\n", True),          # a base class's method
    ("build", "models.py", "return 0", "return 1", True),                  # a class counts with all its methods
    ("build", "shapes.py", "return len(kind)", "return len(kind) + 1", True),   # imported inside the function
    ("build", "shapes.py", "return 0", "return 1", False),
    ("build", FLOW, "SCALE = 2", "SCALE = 3", True),                       # a default argument's constant
    ("build", FLOW, "OFFSET = 1", "OFFSET = 2", False),
    ("limits", FLOW, 'LIMITS["width"] = 3', 'LIMITS["width"] = 4', True),  # a constant changed in place
    ("pick", "models.py", "return 1", "return 2", True),                   # registered by a decorator
    ("outer", FLOW, "return 4", "return 5", True),                         # a node defined in a function
    ("outer", FLOW, "return late", "return late  # made", True),           # ... is the whole function
    ("limits", "models.py", "return 1", "return 2", False),
])
def test_classes_defaults_inner_imports_changes_in_place_and_registries_are_followed(node, path, old, new, changed):
    assert changes(NESTED, node, path, old, new) is changed


DYNAMIC = {
    FLOW: """
        from fluksio import Flow
        import metrics
        from config import *
        from loose import *

        METRIC = "mse"
        flow = Flow("f")

        @flow.node(provides="score")
        def evaluate(pred):
            return getattr(metrics, METRIC)(pred)

        @flow.node(provides="loss")
        def train(pred):
            return metrics.mse(pred)

        @flow.node(provides="depth")
        def depth():
            return DEPTH

        @flow.node(provides="any")
        def anything(name):
            return globals()[name]

        def unrelated():
            return 0
    """,
    "metrics.py": """
        def mse(pred):
            return pred ** 2

        def mae(pred):
            return abs(pred)
    """,
    "config.py": """
        DEPTH = 3
        WIDTH = 4
    """,
    "loose.py": """
        for name in ("A", "B"):
            globals()[name] = 1
    """,
}


@pytest.mark.parametrize(("node", "path", "old", "new", "changed"), [
    ("evaluate", "metrics.py", "abs(pred)", "-abs(pred)", True),     # getattr with a computed name: all of metrics
    ("train", "metrics.py", "abs(pred)", "-abs(pred)", False),       # metrics.mse by name: mse alone
    ("train", "metrics.py", "pred ** 2", "pred ** 3", True),
    ("depth", "config.py", "DEPTH = 3", "DEPTH = 4", True),          # a star import: the name where it is defined
    ("depth", "config.py", "WIDTH = 4", "WIDTH = 5", False),
    ("depth", "loose.py", '("A", "B")', '("A", "C")', True),         # ... or all of a module that defines at run time
    ("anything", FLOW, "return 0", "return 1", True),                # globals(): all of its own module
    ("train", FLOW, "return 0", "return 1", False),
])
def test_what_cannot_be_followed_by_name_counts_its_whole_module(node, path, old, new, changed):
    assert changes(DYNAMIC, node, path, old, new) is changed


EFFECTS = {
    FLOW: """
        from fluksio import Flow
        import random
        from seeding import seed_everything

        seed_everything(0)
        random.seed(1)
        flow = Flow("f")

        @flow.node(provides="x")
        def draw():
            return 1
    """,
    "seeding.py": """
        import random

        def seed_everything(seed):
            random.seed(seed)
    """,
    "configs/model.yaml": "depth: 2\n",
}


@pytest.mark.parametrize(("path", "old", "new"), [
    (FLOW, "seed_everything(0)", "seed_everything(1)"),      # run for its effect when the module is imported
    ("seeding.py", "random.seed(seed)", "random.seed(seed + 1)"),   # ... and what that reaches
    (FLOW, "random.seed(1)", "random.seed(2)"),              # a library's state, changed at import
    ("configs/model.yaml", "depth: 2", "depth: 3"),          # a data file the flow packs
])
def test_effects_at_import_and_data_files_count_for_every_node(path, old, new):
    assert changes(EFFECTS, "draw", path, old, new)


def test_a_file_that_does_not_parse_counts_whole_for_every_node():
    files = {**EFFECTS, "broken.py": "def (:\n"}
    assert changes(files, "draw", "broken.py", "def (", "def ((")


# -- a property: an edited helper changes exactly the nodes that reach it ---------------------------------


@st.composite
def call_graphs(draw):  # type: ignore[no-untyped-def]
    """Helpers h0…hn, each in the flow's module or in helpers.py (hi may call hj for j > i, one in helpers.py
    only those of helpers.py), the helpers a node calls, and the one helper edited."""
    count = draw(st.integers(min_value=1, max_value=7))
    homes = {i: draw(st.sampled_from([FLOW, "helpers.py"])) for i in range(count)}
    calls = {i: {j for j in draw(st.sets(st.integers(min_value=i + 1, max_value=count - 1), max_size=3))
                 if homes[i] == FLOW or homes[j] == "helpers.py"} if i < count - 1 else set()
             for i in range(count)}
    called = draw(st.sets(st.integers(min_value=0, max_value=count - 1), max_size=3))
    return calls, homes, called, draw(st.integers(min_value=0, max_value=count - 1))


def graph_files(calls, homes, called, edited=None):  # type: ignore[no-untyped-def]
    def name(i: int, home: str) -> str:
        return f"h{i}" if homes[i] == home else f"helpers.h{i}"

    modules = {FLOW: ["from fluksio import Flow", "import helpers", 'flow = Flow("f")'], "helpers.py": []}
    for i, home in homes.items():
        body = " + ".join([str(i + (100 if i == edited else 0)), *(f"{name(j, home)}()" for j in sorted(calls[i]))])
        modules[home] += [f"def h{i}():\n    return {body}"]
    body = " + ".join(["0", *(f"{name(i, FLOW)}()" for i in sorted(called))])
    modules[FLOW] += [f'@flow.node(provides="x")\ndef node():\n    return {body}']
    return {path: "\n\n".join(parts) + "\n" for path, parts in modules.items()}


@settings(max_examples=60, deadline=None)
@given(call_graphs())
def test_an_edited_helper_changes_a_node_exactly_when_the_node_reaches_it(graph):
    calls, homes, called, edited = graph
    reachable, todo = set(), list(called)
    while todo:
        i = todo.pop()
        if i not in reachable:
            reachable.add(i)
            todo += calls[i]
    before = identity(graph_files(calls, homes, called), "node")
    after = identity(graph_files(calls, homes, called, edited), "node")
    assert (before != after) is (edited in reachable)


# -- real flows ----------------------------------------------------------------------------------------------

FLOW_FILE = """
from fluksio import Flow
from helpers import fit

flow = Flow("real", inputs={"n": int})

@flow.node(provides="data")
def load(n):
    return list(range(n))

@flow.node(provides="model")
def train(data):
    return fit(data)
"""


def write_project(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "flow.py").write_text(FLOW_FILE)
    (folder / "helpers.py").write_text("def fit(data):\n    return sum(data)\n")
    return folder / "flow.py"


def load(path: Path) -> Flow:
    for name in [n for n in sys.modules if n.startswith("fluksio_flowfile_") or n == "helpers"]:
        del sys.modules[name]
    [flow] = load_flows(str(path))
    return flow


def test_the_same_files_give_the_same_identities_wherever_they_lie_and_an_edit_changes_its_nodes(tmp_path):
    here, there = load(write_project(tmp_path / "a")), load(write_project(tmp_path / "b" / "deeper"))
    assert node_codes(here) == node_codes(there) and set(node_codes(here)) == {"load", "train"}
    helpers = tmp_path / "a" / "helpers.py"
    helpers.write_text(helpers.read_text().replace("sum(data)", "sum(data) + 1"))
    edited = load(tmp_path / "a" / "flow.py")
    assert node_codes(edited)["load"] == node_codes(here)["load"]
    assert node_codes(edited)["train"] != node_codes(here)["train"]


def test_files_edited_after_the_flow_was_loaded_leave_its_nodes_on_the_whole_code(tmp_path):
    path = write_project(tmp_path / "p")
    flow = load(path)
    (tmp_path / "p" / "helpers.py").write_text("def fit(data):\n    return max(data)\n")
    assert node_codes(flow) == {}  # this process runs the old code, which the files no longer hold


def test_a_flow_without_a_file_has_no_node_identities():
    flow = Flow("cell", _defined_in=("__main__", None, None))
    flow.node(lambda: 1, name="one", provides="x")
    assert node_codes(flow) == {}


def test_a_rebuilt_graph_carries_the_identities_worked_out_where_it_was_described(tmp_path):
    flow = load(write_project(tmp_path / "p"))
    described = describe(flow)
    assert {n["name"]: n["code"] for n in described["flows"]["real"]["nodes"]} == node_codes(flow)
    rebuilt = rebuild(json.loads(json.dumps(described)), code_digest="sha256:" + "ab" * 32)
    assert node_codes(rebuilt) == node_codes(flow)
    # A description written before nodes had identities reads as one with none: they key on the whole code.
    for node in described["flows"]["real"]["nodes"]:
        del node["code"]
    assert node_codes(rebuild(described, code_digest="sha256:" + "ab" * 32)) == {}
