"""Finding flows by ``path/file.py:attr``, ``package.module:attr`` or a registered name."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from fluksio.errors import FlowError, FlowNotFound
from fluksio.flows.flow import Flow
from fluksio.flows.registry import KEPT_VERSIONS, FlowRegistry, load_flows
from fluksio.flows.source import code_digest
from tests.unit.flows.notebook import notebook_flow

FLOW_FILE = """
from fluksio import Flow

train = Flow("train", inputs={"x": int}, outputs=["y"])

@train.node(provides="y")
def step(x):
    return x + 1
"""

TWO_FLOWS_FILE = FLOW_FILE + """
evaluate = Flow("evaluate", inputs={"y": int})

@evaluate.node(provides="score")
def score(y):
    return y * 2

not_a_flow = 42
"""


pytestmark = pytest.mark.usefixtures("forget_imported_flow_files")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# -- files -----------------------------------------------------------------------------------------


def test_load_a_file_with_an_attr(tmp_path):
    file = write(tmp_path / "flows.py", FLOW_FILE)
    [flow] = load_flows(f"{file}:train")
    assert isinstance(flow, Flow)
    assert flow.name == "train"
    assert flow.source_file == str(file.resolve())
    assert flow.nodes["step"].fn(1) == 2


def test_load_a_file_without_attr_returns_its_one_flow(tmp_path):
    file = write(tmp_path / "flows.py", FLOW_FILE)
    assert [f.name for f in load_flows(str(file))] == ["train"]


def test_load_a_file_with_several_flows_returns_them_all(tmp_path):
    file = write(tmp_path / "many.py", TWO_FLOWS_FILE)
    assert [f.name for f in load_flows(str(file))] == ["train", "evaluate"]
    [picked] = load_flows(f"{file}:evaluate")
    assert picked.name == "evaluate"


def test_a_relative_path_is_loaded(tmp_path, monkeypatch):
    write(tmp_path / "sub" / "flows.py", FLOW_FILE)
    monkeypatch.chdir(tmp_path)
    [flow] = load_flows("sub/flows.py:train")
    assert flow.name == "train"


def test_a_flow_file_may_import_its_siblings(tmp_path):
    write(tmp_path / "helpers_for_flowfile.py", "OFFSET = 41\n")
    file = write(tmp_path / "uses_sibling.py", """
        from fluksio import Flow
        from helpers_for_flowfile import OFFSET

        flow = Flow("sibling", inputs={"x": int})

        @flow.node(provides="y")
        def add(x):
            return x + OFFSET
    """)
    try:
        [flow] = load_flows(f"{file}:flow")
        assert flow.nodes["add"].fn(1) == 42
        assert str(tmp_path) not in sys.path  # the folder is only on the path while importing
    finally:
        sys.modules.pop("helpers_for_flowfile", None)


def test_unknown_attr_lists_the_flows_in_the_file(tmp_path):
    file = write(tmp_path / "many.py", TWO_FLOWS_FILE)
    with pytest.raises(FlowNotFound) as info:
        load_flows(f"{file}:nope")
    message = str(info.value)
    assert "has no flow named 'nope'" in message
    assert "flows there: train, evaluate" in message


def test_an_attr_that_is_not_a_flow_is_not_found(tmp_path):
    file = write(tmp_path / "many.py", TWO_FLOWS_FILE)
    with pytest.raises(FlowNotFound, match="has no flow named 'not_a_flow'"):
        load_flows(f"{file}:not_a_flow")


def test_a_file_with_no_flow_is_not_found(tmp_path):
    file = write(tmp_path / "empty.py", "x = 1\n")
    with pytest.raises(FlowNotFound, match="defines no Flow"):
        load_flows(str(file))


def test_a_missing_file_is_not_found(tmp_path):
    with pytest.raises(FlowNotFound, match="no flow file"):
        load_flows(f"{tmp_path / 'absent.py'}:flow")


def test_a_file_that_raises_on_import_names_the_file_and_line(tmp_path):
    file = write(tmp_path / "broken.py", """
        from fluksio import Flow

        flow = Flow("broken")
        value = {}["missing"]
    """)
    with pytest.raises(FlowNotFound) as info:
        load_flows(f"{file}:flow")
    message = str(info.value)
    assert f"{file.resolve()}:5:" in message
    assert "KeyError" in message and "'missing'" in message
    assert "fluksio/flows" not in message  # fluksio's own frames are not the place to look
    assert not [m for m in sys.modules if m.startswith("fluksio_flowfile_broken")]


def test_a_failing_import_names_the_line_in_the_flow_file_not_in_a_helper(tmp_path):
    write(tmp_path / "helper_that_fails.py", "def boom():\n    raise RuntimeError('kaput')\n")
    file = write(tmp_path / "calls_helper.py", """
        import helper_that_fails

        helper_that_fails.boom()
    """)
    try:
        with pytest.raises(FlowNotFound) as info:
            load_flows(str(file))
    finally:
        sys.modules.pop("helper_that_fails", None)
    assert f"{file.resolve()}:4: RuntimeError: kaput" in str(info.value)


def test_a_syntax_error_names_file_and_line(tmp_path):
    file = write(tmp_path / "syntax.py", "from fluksio import Flow\n\ndef broken(:\n    pass\n")
    with pytest.raises(FlowNotFound) as info:
        load_flows(f"{file}:flow")
    assert f"{file.resolve()}:3:" in str(info.value)


def test_a_flow_error_in_a_file_stays_a_flow_error(tmp_path):
    file = write(tmp_path / "bad_graph.py", """
        from fluksio import Flow
        flow = Flow("bad name with spaces")
    """)
    with pytest.raises(FlowError, match="flow name"):
        load_flows(str(file))


def test_an_invalid_graph_in_a_file_is_reported_when_loaded(tmp_path):
    file = write(tmp_path / "unprovided.py", """
        from fluksio import Flow
        flow = Flow("unprovided")

        @flow.node(provides="y")
        def step(nothing):
            return 1
    """)
    with pytest.raises(FlowError, match="nobody provides 'nothing'"):
        load_flows(f"{file}:flow")


# -- modules ---------------------------------------------------------------------------------------


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "pkgroot"
    write(root / "flowpkg_demo" / "__init__.py", "")
    write(root / "flowpkg_demo" / "pipelines.py", TWO_FLOWS_FILE)
    write(root / "flowpkg_demo" / "raising.py", "import os\nraise ValueError('configuration missing')\n")
    write(root / "flowpkg_demo" / "needs_missing.py", "import flowpkg_surely_not_installed_anywhere\n")
    monkeypatch.syspath_prepend(str(root))
    return root


def test_load_package_module_attr(package):
    [flow] = load_flows("flowpkg_demo.pipelines:evaluate")
    assert flow.name == "evaluate"
    assert flow.module == "flowpkg_demo.pipelines"


def test_load_a_module_without_attr_returns_every_flow(package):
    assert sorted(f.name for f in load_flows("flowpkg_demo.pipelines")) == ["evaluate", "train"]


def test_unknown_attr_in_a_module_lists_its_flows(package):
    with pytest.raises(FlowNotFound, match=r"flowpkg_demo.pipelines has no flow named 'nope' \(flows there: "):
        load_flows("flowpkg_demo.pipelines:nope")


def test_an_unknown_module_is_not_found(package):
    with pytest.raises(FlowNotFound, match="no module named 'flowpkg_demo.absent'"):
        load_flows("flowpkg_demo.absent:flow")


def test_a_module_whose_own_import_is_missing_says_so(package):
    with pytest.raises(FlowNotFound) as info:
        load_flows("flowpkg_demo.needs_missing:flow")
    message = str(info.value)
    assert "cannot import flowpkg_demo.needs_missing" in message
    assert "flowpkg_surely_not_installed_anywhere" in message


def test_a_module_that_raises_on_import_names_file_and_line(package):
    with pytest.raises(FlowNotFound) as info:
        load_flows("flowpkg_demo.raising:flow")
    message = str(info.value)
    assert f"{package / 'flowpkg_demo' / 'raising.py'}:2:" in message
    assert "ValueError: configuration missing" in message


# -- the registry ----------------------------------------------------------------------------------


def make_flow(name: str) -> Flow:
    flow = Flow(name, inputs={"x": int})
    flow.node(lambda x: x, name="step", provides="y")
    return flow


def test_registry_get_returns_a_registered_flow():
    registry = FlowRegistry()
    flow = make_flow("alpha")
    assert registry.register(flow) is flow
    assert registry.get("alpha") is flow
    assert registry.names() == ["alpha"]


def test_registry_get_unknown_name_lists_registered_names():
    registry = FlowRegistry()
    registry.register(make_flow("beta"))
    registry.register(make_flow("alpha"))
    with pytest.raises(FlowNotFound) as info:
        registry.get("gamma")
    message = str(info.value)
    assert "no flow named 'gamma'" in message
    assert "registered: alpha, beta" in message
    assert "FLUKSIO_FLOWS" in message


def test_registry_get_on_an_empty_registry_says_none():
    with pytest.raises(FlowNotFound, match=r"registered: none"):
        FlowRegistry().get("anything")


def test_registry_refuses_an_invalid_flow():
    registry = FlowRegistry()
    broken = Flow("broken")
    broken.node(lambda nothing: 1, name="step", provides="y")
    with pytest.raises(FlowError):
        registry.register(broken)
    assert registry.names() == []


def test_registry_load_sources_registers_files_and_modules(tmp_path, package):
    file = write(tmp_path / "flows.py", FLOW_FILE.replace('"train"', '"from_file"'))
    registry = FlowRegistry()
    registry.load_sources([str(file), "flowpkg_demo.pipelines"])
    assert registry.names() == ["evaluate", "from_file", "train"]


def test_registry_resolve_by_object_name_and_reference(tmp_path):
    registry = FlowRegistry()
    flow = make_flow("alpha")
    assert registry.resolve(flow) is flow  # registers it
    assert registry.resolve("alpha") is flow
    file = write(tmp_path / "flows.py", FLOW_FILE)
    resolved = registry.resolve(f"{file}:train")
    assert resolved.name == "train"
    assert registry.get("train") is resolved


def test_registry_resolve_a_file_with_several_flows_asks_to_pick_one(tmp_path):
    file = write(tmp_path / "many.py", TWO_FLOWS_FILE)
    with pytest.raises(FlowNotFound, match=r"defines several flows \(train, evaluate\); pick one"):
        FlowRegistry().resolve(str(file))


@pytest.mark.parametrize("reference", ["", None, 3])
def test_registry_resolve_rejects_non_references(reference):
    with pytest.raises(FlowNotFound, match="expected a Flow or a flow reference"):
        FlowRegistry().resolve(reference)


def test_registry_resolve_unknown_plain_name_is_not_found():
    with pytest.raises(FlowNotFound, match="no flow named 'ghost'"):
        FlowRegistry().resolve("ghost")


# -- the digest of the code as loaded --------------------------------------------------------------


def edit(path: Path, old: str, new: str) -> None:
    """Change the file's text (and its size, so the stat-keyed digest memo cannot miss the edit)."""
    text = path.read_text()
    assert old in text and len(old) != len(new)
    path.write_text(text.replace(old, new))


def reimport(path: Path) -> list[Flow]:
    """Import the file afresh, as a process started after an edit (or importlib.reload) would."""
    for name in [n for n in sys.modules if n.startswith("fluksio_flowfile_")]:
        del sys.modules[name]
    return load_flows(str(path))


def test_the_registered_digest_stays_the_code_as_loaded_when_the_file_changes(tmp_path):
    file = write(tmp_path / "flows.py", FLOW_FILE)
    registry = FlowRegistry()
    registry.load_sources([str(file)])
    flow = registry.get("train")
    loaded = registry.digest("train")
    assert loaded == code_digest(flow) and loaded.startswith("sha256:")
    edit(file, "x + 1", "x + 1000")
    assert code_digest(flow) != loaded  # the disk moved on ...
    assert registry.digest("train") == loaded  # ... the code this process runs did not
    assert registry.digest(flow) == loaded
    assert flow.nodes["step"].fn(1) == 2
    # The module stays imported: a second registry in this process loads the same code, and says so.
    other = FlowRegistry()
    other.load_sources([str(file)])
    assert other.get("train") is flow and other.digest("train") == loaded


def test_the_digest_is_taken_when_the_module_runs_not_when_the_flow_is_first_registered(tmp_path):
    file = write(tmp_path / "flows.py", FLOW_FILE)
    [flow] = load_flows(str(file))  # imported (a notebook's `from flows import train`), not registered yet
    before = code_digest(flow)
    edit(file, "x + 1", "x + 1000")
    registry = FlowRegistry()
    registry.register(flow)  # first submitted after the edit: still the old code
    assert registry.digest("train") == before != code_digest(flow)


def test_a_changed_flow_registered_under_the_same_name_replaces_the_digest(tmp_path):
    file = write(tmp_path / "flows.py", FLOW_FILE)
    registry = FlowRegistry()
    [old] = load_flows(str(file))
    registry.register(old)
    old_digest = registry.digest("train")
    edit(file, "x + 1", "x + 1000")
    [new] = reimport(file)
    assert registry.resolve(new) is new
    assert registry.get("train") is new and new.nodes["step"].fn(1) == 1001
    assert registry.digest("train") == code_digest(new) != old_digest
    # The earlier code is still held, under its own digest, for runs claimed with it.
    assert registry.version("train", old_digest) is old and registry.version("train", registry.digest("train")) is new
    assert registry.digest(old) == old_digest


def test_a_flow_without_a_file_redefined_in_a_notebook_gets_the_new_digest():
    registry = FlowRegistry()
    first = registry.resolve(notebook_flow("x + 1"))
    first_digest = registry.digest("cell")
    assert first.source_digest is None and first_digest == code_digest(first)
    second = registry.resolve(notebook_flow("x * 3"))
    assert registry.get("cell") is second and registry.digest("cell") == code_digest(second) != first_digest
    assert registry.version("cell", first_digest) is first


def test_a_node_added_to_a_registered_flow_without_a_file_changes_its_digest_when_registered_again():
    registry = FlowRegistry()
    flow = registry.resolve(notebook_flow("x + 1"))
    before = registry.digest("cell")
    assert registry.resolve(flow) is flow and registry.digest("cell") == before  # a resubmit: same code

    @flow.node(provides="z")
    def double(y):
        return y * 2

    registry.resolve(flow)
    assert registry.digest("cell") == code_digest(flow) != before


def test_only_the_latest_versions_of_a_flow_are_kept():
    registry = FlowRegistry()
    digests = []
    for count in range(KEPT_VERSIONS + 2):
        registry.register(notebook_flow(f"x + {count}"))
        digests.append(registry.digest("cell"))
    assert len(set(digests)) == len(digests)
    assert registry.version("cell", digests[0]) is None and registry.version("cell", digests[1]) is None
    assert all(registry.version("cell", d) is not None for d in digests[2:])
    assert registry.version("cell", digests[-1]) is registry.get("cell")


def test_the_digest_of_an_unknown_flow_is_not_found():
    with pytest.raises(FlowNotFound, match="no flow named 'nope' is registered here"):
        FlowRegistry().digest("nope")
