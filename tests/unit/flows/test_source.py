"""The code digest: a flow's file and the .py files of its tree it imports, and nothing else."""

from __future__ import annotations

import functools
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fluksio.flows.flow import Flow
from fluksio.flows.imports import root_of
from fluksio.flows.registry import load_flows
from fluksio.flows.source import code_digest, loaded_digest, short
from tests.unit.flows.notebook import notebook_flow

FLOW_FILE = """
from fluksio import Flow
from flowpkg_helpers import OFFSET

flow = Flow("digested", inputs={"x": int})

@flow.node(provides="y")
def step(x):
    return x + 1
"""


pytestmark = pytest.mark.usefixtures("forget_imported_flow_files")


def write(path: Path, text: str) -> None:
    """Write and move the mtime forward, so the stat-keyed memo can never mistake it for the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(textwrap.dedent(text))
    stat = path.stat()
    if stat.st_mtime_ns <= old:
        os.utime(path, ns=(stat.st_atime_ns, old + 1_000_000))


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    write(root / "flows.py", FLOW_FILE)
    write(root / "flowpkg_helpers.py", "OFFSET = 1\n")
    [flow] = load_flows(str(root / "flows.py"))
    return root, flow


def test_digest_is_a_sha256_and_stable(project):
    _, flow = project
    digest = code_digest(flow)
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    assert code_digest(flow) == digest


def test_source_root_is_the_folder_of_the_flow_file(project):
    root, flow = project
    assert root_of(flow.source_file) == root.resolve()


def test_editing_the_flow_file_changes_the_digest(project):
    root, flow = project
    before = code_digest(flow)
    write(root / "flows.py", FLOW_FILE.replace("x + 1", "x + 2"))
    assert code_digest(flow) != before


def test_editing_a_module_the_flow_imports_changes_the_digest(project):
    root, flow = project
    before = code_digest(flow)
    write(root / "flowpkg_helpers.py", "OFFSET = 22\n")
    assert code_digest(flow) != before


@pytest.mark.parametrize("relative", ["scratch.py", "lib/model.py", "tests/test_helpers.py"])
def test_a_py_file_the_flow_does_not_import_does_not_change_the_digest(project, relative):
    root, flow = project
    before = code_digest(flow)
    write(root / relative, "LAYERS = 3\n")
    assert code_digest(flow) == before


def test_imports_are_followed_from_module_to_module_and_from_inside_functions(project):
    root, flow = project
    write(root / "flowpkg_helpers.py", "from lib.model import LAYERS\nOFFSET = 1\n")
    write(root / "lib" / "__init__.py", "")
    write(root / "lib" / "model.py", "def layers():\n    import lib.sizes\n    return 3\n")
    write(root / "lib" / "sizes.py", "WIDTH = 8\n")
    for edited in ("lib/model.py", "lib/__init__.py", "lib/sizes.py"):
        before = code_digest(flow)
        write(root / edited, (root / edited).read_text() + "# edited\n")
        assert code_digest(flow) != before, edited


def test_renaming_an_imported_file_changes_the_digest(project):
    root, flow = project
    before = code_digest(flow)
    (root / "flowpkg_helpers.py").rename(root / "utilities.py")
    assert code_digest(flow) != before


@pytest.mark.parametrize(
    "relative",
    [
        ".hidden/secret.py",
        ".git/hooks/pre_commit.py",
        "__pycache__/flows.cpython-311.py",
        "lib/__pycache__/x.py",
        "node_modules/pkg/index.py",
        "build/lib/copy.py",
        "dist/copy.py",
        "notes.txt",
        "data.json",
    ],
)
def test_files_outside_the_code_do_not_change_the_digest(project, relative):
    root, flow = project
    before = code_digest(flow)
    write(root / relative, "print('not part of the code')\n")
    assert code_digest(flow) == before


def test_a_virtualenv_inside_the_folder_is_skipped(project):
    root, flow = project
    before = code_digest(flow)
    write(root / "env" / "pyvenv.cfg", "home = /usr/bin\n")
    write(root / "env" / "lib" / "site.py", "x = 1\n")
    assert code_digest(flow) == before


def test_a_flow_in_a_package_digests_what_it_imports_from_the_package(tmp_path, monkeypatch):
    top = tmp_path / "proj" / "flowpkg_digested"
    write(top / "__init__.py", "")
    write(top / "sub" / "__init__.py", "")
    write(top / "sub" / "flows.py", FLOW_FILE.replace("from flowpkg_helpers import OFFSET",
                                                       "from ..models import A\nfrom flowpkg_digested import util"))
    write(top / "models.py", "A = 1\n")
    write(top / "util.py", "B = 1\n")
    write(top / "unrelated.py", "C = 1\n")
    monkeypatch.syspath_prepend(str(top.parent))
    [flow] = load_flows("flowpkg_digested.sub.flows")
    assert root_of(flow.source_file) == top.resolve()
    for edited, counts in [("models.py", True), ("util.py", True), ("__init__.py", True), ("sub/__init__.py", True),
                           ("unrelated.py", False)]:
        before = code_digest(flow)
        write(top / edited, (top / edited).read_text() + "# edited\n")
        assert (code_digest(flow) != before) is counts, edited


def test_two_folders_with_the_same_files_have_the_same_digest(tmp_path):
    flows = []
    for name in ("one", "two"):
        write(tmp_path / name / "flows.py", FLOW_FILE)
        write(tmp_path / name / "flowpkg_helpers.py", "OFFSET = 1\n")
        [flow] = load_flows(str(tmp_path / name / "flows.py"))
        flows.append(flow)
    assert code_digest(flows[0]) == code_digest(flows[1])


def test_a_flow_without_a_file_digests_its_node_functions():
    build = functools.partial(notebook_flow, name="repl")
    one, same, other = build("x + 1"), build("x + 1"), build("x * 3")
    assert one.source_file is None and root_of(one.source_file) is None
    assert code_digest(one) == code_digest(same)
    assert code_digest(one) != code_digest(other)


def test_a_flow_without_source_to_read_digests_its_compiled_code_constants_included():
    def build(body):
        namespace: dict = {"Flow": Flow, "__name__": "no_file"}
        # compile() without a file behind it: inspect.getsource fails, as in a plain `python` REPL.
        exec(compile(textwrap.dedent(f"""
            flow = Flow("repl", inputs={{"x": int}})
            def step(x):
                return {body}
            flow.node(step, provides="y")
        """), "<stdin>", "exec"), namespace)
        return namespace["flow"]

    one, same = build("x + 1"), build("x + 1")
    with pytest.raises(OSError):
        inspect.getsource(one.nodes["step"].fn)
    assert code_digest(one) == code_digest(same)
    assert code_digest(one) != code_digest(build("x + 2"))  # same bytecode, other constant
    assert code_digest(one) != code_digest(build("y_of(x) + 1"))  # other name
    assert code_digest(build("x in {'a', 'b'}")) != code_digest(build("x in {'a', 'c'}"))


# -- the code as loaded ------------------------------------------------------------------------------


def test_the_loaded_digest_is_the_tree_when_the_flow_was_defined(project):
    root, flow = project
    assert flow.source_digest == loaded_digest(flow) == code_digest(flow)
    write(root / "flows.py", FLOW_FILE.replace("x + 1", "x + 2"))
    write(root / "flowpkg_helpers.py", "OFFSET = 22\n")
    assert code_digest(flow) != flow.source_digest  # on disk now
    assert loaded_digest(flow) == flow.source_digest  # what this process imported


def test_a_flow_without_a_file_has_no_snapshot_and_its_loaded_digest_is_its_functions():
    namespace: dict = {"Flow": Flow, "__name__": "no_file"}
    exec("flow = Flow('repl')\n@flow.node(provides='y')\ndef step():\n    return 1\n", namespace)
    flow = namespace["flow"]
    assert flow.source_digest is None
    assert loaded_digest(flow) == code_digest(flow)


def test_short_keeps_the_kind_and_twelve_hex_digits():
    assert short("sha256:" + "ab" * 32) == "sha256:abababababab…"
    assert short(None) == "none"


def test_the_digest_of_compiled_code_is_the_same_in_every_process():
    script = textwrap.dedent("""
        from fluksio.flows.flow import Flow
        from fluksio.flows.source import code_digest
        namespace = {"Flow": Flow, "__name__": "no_file"}
        exec(compile("flow = Flow('repl')\\n@flow.node(provides='y')\\ndef step():\\n"
                     "    return 'q' in {'a', 'b', 'c', 'd', 'e', 'f'}\\n", "<stdin>", "exec"), namespace)
        print(code_digest(namespace["flow"]))
    """)
    digests = {
        subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": seed},
                       capture_output=True, text=True, check=True).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1 and next(iter(digests)).startswith("sha256:")


# -- how imports are found ----------------------------------------------------------------------------


def edits_count(root: Path, flow: Flow, relative: str) -> bool:
    before = code_digest(flow)
    write(root / relative, (root / relative).read_text() + "# edited\n")
    return code_digest(flow) != before


def test_a_module_that_is_a_symlink_to_a_file_outside_the_tree_counts_under_its_name(tmp_path):
    shared = tmp_path / "shared" / "flowpkg_common.py"
    write(shared, "SCALE = 2\n")
    root = tmp_path / "project"
    write(root / "flows.py", FLOW_FILE.replace("from flowpkg_helpers import OFFSET", "import flowpkg_common"))
    (root / "flowpkg_common.py").symlink_to(shared)
    [flow] = load_flows(str(root / "flows.py"))  # loads: the link is followed, not refused
    assert edits_count(tmp_path, flow, "shared/flowpkg_common.py")


def test_a_sibling_imported_from_a_folder_with_an_init_loaded_by_path_counts(tmp_path):
    root = tmp_path / "flowpkg_folder"
    write(root / "__init__.py", "")
    write(root / "flows.py", FLOW_FILE)
    write(root / "flowpkg_helpers.py", "OFFSET = 1\n")
    [flow] = load_flows(str(root / "flows.py"))  # its folder is on sys.path: `from flowpkg_helpers import`
    assert edits_count(root, flow, "flowpkg_helpers.py")


def test_a_module_of_a_namespace_package_imported_by_its_full_name_counts(tmp_path, monkeypatch):
    root = tmp_path / "proj" / "flowpkg_ns"  # no __init__.py
    write(root / "train.py", FLOW_FILE.replace("from flowpkg_helpers import OFFSET",
                                               "from flowpkg_ns import helpers"))
    write(root / "helpers.py", "OFFSET = 1\n")
    monkeypatch.syspath_prepend(str(root.parent))
    [flow] = load_flows("flowpkg_ns.train")
    assert edits_count(root, flow, "helpers.py")


def test_a_star_import_of_a_package_counts_its_modules_and_submodule_imports_are_followed(tmp_path):
    root = tmp_path / "project"
    write(root / "flows.py", FLOW_FILE.replace("from flowpkg_helpers import OFFSET",
                                               "from flowpkg_star import *\nimport flowpkg_build.steps"))
    write(root / "flowpkg_star" / "__init__.py", "__all__ = ['layers']\n")
    write(root / "flowpkg_star" / "layers.py", "DEPTH = 3\n")
    write(root / "flowpkg_build" / "__init__.py", "")
    write(root / "flowpkg_build" / "steps.py", "STEPS = 1\n")
    [flow] = load_flows(str(root / "flows.py"))
    assert edits_count(root, flow, "flowpkg_star/layers.py")
    assert edits_count(root, flow, "flowpkg_build/steps.py")
