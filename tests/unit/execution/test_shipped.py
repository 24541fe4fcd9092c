"""Importing a shipped code package in a process of its own: by module or by file, its failures in one line,
and which of the worker's modules such a process forgets first."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio.errors import NodeFailed
from fluksio.execution.shipped import flow_code_modules, load_package
from fluksio.flows.package import pack, unpack
from fluksio.messages import NodeCall
from fluksio.schemas import Grant

FLOW = ("from fluksio import Flow\nfrom {helper} import RATE\n\nmodel = Flow('model')\n\n\n"
        "@model.node(provides='rate')\ndef fit():\n    return RATE\n")


@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What a test's imports add to this process (modules, ``sys.path``, the bytecode switch) is undone after it."""
    before = set(sys.modules)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "dont_write_bytecode", sys.dont_write_bytecode)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def call_for(digest: str, flow: str = "model", node: str = "fit") -> NodeCall:
    return NodeCall(call_id="r.fit.1", run_id="r", flow=flow, node=node, attempt=1, inputs={},
                    grant=Grant(id="r.fit.1", machine="box", cpus=1), code_digest=digest, code_entry="x")


@pytest.mark.usefixtures("isolated_imports")
def test_a_package_entry_given_as_a_module_is_imported_from_the_package_folder(tmp_path: Path) -> None:
    source = tmp_path / "src" / "shippedpkg"
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("")
    (source / "rates.py").write_text("RATE = 0.25\n")
    (source / "flows.py").write_text(FLOW.format(helper="shippedpkg.rates"))
    package = pack(str(source / "flows.py"), module="shippedpkg.flows")
    assert package.entry == "shippedpkg.flows"
    folder = tmp_path / "unpacked"
    unpack(package.data, folder)
    loaded = load_package(folder, package.entry)
    assert loaded.failure is None and loaded.registry.names() == ["model"]
    flow, node = loaded.node_for(call_for(package.digest))
    assert node.fn() == 0.25 and Path(sys.modules["shippedpkg.rates"].__file__ or "").parent == folder / "shippedpkg"
    assert not list(folder.rglob("__pycache__"))  # nothing written into the worker's cache
    with pytest.raises(NodeFailed, match="has no node 'predict'"):
        loaded.node_for(call_for(package.digest, node="predict"))
    with pytest.raises(NodeFailed, match=r"defines no flow 'other' in shippedpkg.flows \(it defines: model\)"):
        loaded.node_for(call_for(package.digest, flow="other"))


@pytest.mark.usefixtures("isolated_imports")
def test_an_import_that_fails_is_kept_as_one_line_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text("from fluksio import Flow\n\nraise KeyError('no such setting')\n")
    loaded = load_package(tmp_path, "flows.py")
    assert loaded.failure == f"cannot import {tmp_path / 'flows.py'}: {tmp_path / 'flows.py'}:3: KeyError: " \
                             "'no such setting'"
    with pytest.raises(NodeFailed, match="code package sha256:000000000000… failed to import on machine box: "):
        loaded.node_for(call_for("sha256:" + "0" * 64))
    missing = load_package(tmp_path, "nosuchmodule.flows")
    assert missing.failure is not None and "\n" not in missing.failure and "nosuchmodule" in missing.failure


@pytest.mark.usefixtures("isolated_imports")
def test_the_workers_own_flow_modules_are_what_a_package_process_forgets(tmp_path: Path) -> None:
    (tmp_path / "residenthelpers.py").write_text("X = 1\n")
    (tmp_path / "residentpkg").mkdir()
    (tmp_path / "residentpkg" / "__init__.py").write_text("")
    (tmp_path / "residentpkg" / "flows.py").write_text("import residenthelpers\nimport colorsys\n")
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("colorsys", None)  # a module of the standard library, imported by the flows
    before = set(sys.modules)
    importlib.import_module("residentpkg.flows")
    appeared = set(sys.modules) - before
    assert {"residentpkg", "residentpkg.flows", "residenthelpers", "colorsys"} <= appeared
    forgotten = flow_code_modules(appeared, ["residentpkg.flows"])
    assert {"residentpkg", "residentpkg.flows", "residenthelpers"} <= set(forgotten)
    assert "colorsys" not in forgotten  # the interpreter's library stays: not the flows' code


@pytest.mark.parametrize("entry", ["/tmp/elsewhere/evil.py", "../evil.py", "sub/../../evil.py", "os", "evil",
                                   "not a module", "pkg..flows"])
def test_an_entry_that_is_not_the_packages_own_is_refused_before_anything_is_imported(tmp_path, entry):
    """The entry travels beside the digest (the run store, the message): it must name the package's own code."""
    package, elsewhere = tmp_path / "package", tmp_path / "elsewhere"
    package.mkdir()
    elsewhere.mkdir()
    (package / "flows.py").write_text("from fluksio import Flow\nf = Flow('f')\n")
    mark = tmp_path / "imported"
    for place in (tmp_path / "evil.py", elsewhere / "evil.py", package.parent / "evil.py"):
        place.write_text(f"open({str(mark)!r}, 'w').write('x')\n")
    loaded = load_package(package, entry.replace("/tmp/elsewhere", str(elsewhere)))
    assert loaded.failure is not None and "is not a module or file of the package; refused" in loaded.failure
    assert not mark.exists()  # nothing of it ran


def test_the_packages_own_file_and_module_entries_are_accepted(tmp_path):
    from fluksio.execution.shipped import entry_outside

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "flows.py").write_text("")
    (tmp_path / "top.py").write_text("")
    assert [entry_outside(tmp_path, e) for e in ("pkg/flows.py", "top.py", "pkg.flows", "top", "pkg")] == [None] * 5
