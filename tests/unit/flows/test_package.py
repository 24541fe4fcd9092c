"""Code packages: the same files make the same archive anywhere, only the code and included data travel,
and unpacking refuses whatever could land outside its folder or fill a disk."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import time
import zipfile
from pathlib import Path

import pytest

from fluksio.errors import FlowError
from fluksio.flows import imports, package
from fluksio.flows.package import (
    PackageError,
    PackedFile,
    largest,
    pack,
    package_digest,
    package_files,
    read_files,
    unpack,
)

FLOW = "from helpers import OFFSET\n\nVALUE = OFFSET + 1\n"
#: The digest of the two-file tree of test_the_archive_format_is_pinned: a change of format changes every
#: run's code digest (every cache entry and every package ever stored), so it is made on purpose or not at all.
PINNED = "sha256:72d77be5fd38b0d6391d326949984bae73577e904761edc034044ae85c82a43d"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def settle() -> None:
    """Wait until the files just written are old enough for their stat state to be trusted (imports.SETTLE_NS)."""
    time.sleep(imports.SETTLE_NS / 1e9 + 0.02)


def project(root: Path) -> Path:
    """A plain folder: a flow file that imports a helper, and a module it does not import."""
    write(root / "helpers.py", "OFFSET = 1\n")
    write(root / "unrelated.py", "UNUSED = 1\n")
    return write(root / "flows.py", FLOW)


def names(source_file: Path, include: tuple[str, ...] = ()) -> list[str]:
    return [name for name, _ in package_files(str(source_file), include)]


def archive_of(entries: list[tuple[str, bytes]], mode: int = 0o100644,
               compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, content in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = mode << 16
            info.compress_type = compression
            archive.writestr(info, content)
    return buffer.getvalue()


# -- the same bytes anywhere --------------------------------------------------------------------------------


def test_the_same_files_make_the_same_bytes_wherever_whenever_and_however_they_were_written(tmp_path):
    one = project(tmp_path / "one" / "deep" / "folder")
    write(tmp_path / "one" / "deep" / "folder" / "data" / "a.csv", "1,2\n")
    # The other copy: files made in the other order, other mtimes, other permissions.
    other_root = tmp_path / "two"
    write(other_root / "data" / "a.csv", "1,2\n")
    other = write(other_root / "flows.py", FLOW)
    write(other_root / "unrelated.py", "UNUSED = 1\n")
    write(other_root / "helpers.py", "OFFSET = 1\n")
    for path in other_root.rglob("*"):
        if path.is_file():
            os.utime(path, (1_000_000_000, 1_000_000_000))
            path.chmod(0o600)
    first, second = pack(str(one), ["data/*.csv"]), pack(str(other), ["data/*.csv"])
    assert first.data == second.data and first.digest == second.digest
    assert [f.path for f in first.files] == ["data/a.csv", "flows.py", "helpers.py"]


def test_the_archive_format_is_pinned(tmp_path):
    write(tmp_path / "helpers.py", "OFFSET = 1\n")
    flow = write(tmp_path / "flows.py", FLOW)
    packed = pack(str(flow))
    with zipfile.ZipFile(io.BytesIO(packed.data)) as archive:
        entries = archive.infolist()
    assert [e.filename for e in entries] == ["flows.py", "helpers.py"]
    assert {(e.date_time, e.create_system, e.external_attr >> 16, e.compress_type, e.extra, e.comment)
            for e in entries} == {((1980, 1, 1, 0, 0, 0), 3, 0o100644, zipfile.ZIP_STORED, b"", b"")}
    assert packed.digest == PINNED


def test_the_digest_is_the_sha256_of_the_archive_and_package_digest_says_the_same(tmp_path):
    flow = project(tmp_path)
    packed = pack(str(flow))
    assert packed.digest == "sha256:" + hashlib.sha256(packed.data).hexdigest() == package_digest(str(flow))
    assert read_files(packed.data) == list(packed.files) == [PackedFile("flows.py", len(FLOW)),
                                                              PackedFile("helpers.py", len("OFFSET = 1\n"))]


# -- what is packed, under which path --------------------------------------------------------------------------


def test_a_plain_folder_is_packed_from_its_root_and_only_what_the_flow_imports(tmp_path):
    flow = project(tmp_path)
    assert names(flow) == ["flows.py", "helpers.py"]  # not unrelated.py


def test_a_package_is_packed_under_its_name_so_a_worker_imports_it_by_that_name(tmp_path):
    top = tmp_path / "proj" / "mypkg"
    write(top / "__init__.py", "")
    write(top / "sub" / "__init__.py", "")
    flow = write(top / "sub" / "flows.py", "from mypkg import helpers\nfrom ..models import A\n")
    write(top / "helpers.py", "B = 1\n")
    write(top / "models.py", "A = 1\n")
    write(top / "unrelated.py", "C = 1\n")
    packed = pack(str(flow), module="mypkg.sub.flows")
    assert [f.path for f in packed.files] == ["mypkg/__init__.py", "mypkg/helpers.py", "mypkg/models.py",
                                              "mypkg/sub/__init__.py", "mypkg/sub/flows.py"]
    assert packed.entry == "mypkg.sub.flows"


@pytest.mark.parametrize(("module", "entry"), [
    ("flows", "flows"),
    (None, "flows.py"),
    ("__main__", "flows.py"),
    ("fluksio_flowfile_flows_ab12cd", "flows.py"),
    ("elsewhere.flows", "flows.py"),  # its name implies a file the archive does not hold there
    ("helpers", "flows.py"),  # a file of the archive, but not the flow's
])
def test_the_entry_is_the_module_name_only_when_that_name_finds_the_flow_file(tmp_path, module, entry):
    flow = project(tmp_path)
    assert pack(str(flow), module=module).entry == entry


def test_a_flow_file_in_a_subfolder_of_a_plain_folder_package_is_named_by_its_path(tmp_path):
    top = tmp_path / "pkg"
    write(top / "__init__.py", "")
    flow = write(top / "flows" / "__init__.py", "X = 1\n")
    assert pack(str(flow), module="pkg.flows").entry == "pkg.flows"
    assert pack(str(flow), module="flows").entry == "pkg/flows/__init__.py"


@pytest.mark.parametrize("source", [
    b"from helpers import (\n    OFFSET,  # the offset (in steps)\n    SCALE,\n)\n",
    b"from helpers import (\r\n    OFFSET,\r\n)\r\n",
    b"from helpers \\\n    import OFFSET\n",
    b"try: import helpers\nexcept ImportError: pass\n",
    b"x = 1; import helpers\n",
    b"\xef\xbb\xbfimport helpers\n",
    b'"""Steps, read\nfrom the table; see: import this.\n"""\nimport os, helpers as h\n',
    b"def f():\n    if True:\n        from helpers import OFFSET\n",
    b"class C:\n    import helpers\n",
    b"from . import helpers\n",
    b"raise ValueError('x') \\\n    from None\nimport helpers\n",
], ids=["parenthesized", "crlf", "backslash", "after-colon", "after-semicolon", "bom", "prose-in-docstring",
        "in-a-function", "in-a-class", "relative", "raise-from"])
def test_every_way_of_writing_an_import_is_followed(tmp_path, source):
    write(tmp_path / "helpers.py", "OFFSET = SCALE = 1\n")
    flow = write(tmp_path / "flows.py", source)
    assert names(flow) == ["flows.py", "helpers.py"]


def test_include_globs_add_data_files_relative_to_the_flow_file(tmp_path):
    flow = project(tmp_path)
    for relative in ("configs/a.yaml", "configs/b.yaml", "configs/c.txt", "data/x.csv", "data/2024/01/y.csv",
                     "assets/logo.svg", "assets/fonts/a.ttf"):
        write(tmp_path / relative, relative)
    include = ("configs/*.yaml", "data/**/*.csv", "assets/**", "nothing/*.here", "configs")
    assert names(flow, include) == ["assets/fonts/a.ttf", "assets/logo.svg", "configs/a.yaml", "configs/b.yaml",
                                    "data/2024/01/y.csv", "data/x.csv", "flows.py", "helpers.py"]
    packed = pack(str(flow), include)
    with zipfile.ZipFile(io.BytesIO(packed.data)) as archive:
        assert archive.read("data/2024/01/y.csv") == b"data/2024/01/y.csv"


@pytest.mark.parametrize("relative", [
    ".git/config",
    ".env",
    "data/.hidden.csv",
    ".fluksio/fluksio.db",
    ".venv/lib/python3.11/site-packages/x.py",
    "env/lib/python3.11/site-packages/x.py",  # a virtual environment of another name: its pyvenv.cfg says so
    "__pycache__/flows.cpython-311.pyc",
    "lib/__pycache__/helpers.cpython-311.pyc",
    "lib/old.pyc",
    "web/node_modules/left-pad/index.js",
])
def test_what_is_never_packed_even_when_included(tmp_path, relative):
    flow = project(tmp_path)
    for venv in (".venv", "env"):
        write(tmp_path / venv / "pyvenv.cfg", "home = /usr/bin\n")
    write(tmp_path / relative, "not code to ship\n")
    write(tmp_path / "lib" / "kept.txt", "kept\n")
    assert names(flow, ("**",)) == ["flows.py", "helpers.py", "lib/kept.txt", "unrelated.py"]
    assert names(flow, (relative,)) == ["flows.py", "helpers.py"]


def test_an_include_that_reaches_outside_the_packed_folder_is_refused_naming_the_glob(tmp_path):
    flow = project(tmp_path / "project")
    write(tmp_path / "secrets" / "key.txt", "do not ship\n")
    with pytest.raises(FlowError, match=r"include='\.\./secrets/\*\.txt' matches .*outside"):
        pack(str(flow), ["../secrets/*.txt"])
    with pytest.raises(FlowError, match="'/etc/passwd' is not a glob relative to the flow's file"):
        pack(str(flow), ["/etc/passwd"])
    assert names(flow, ("../missing/*.txt",)) == ["flows.py", "helpers.py"]  # matching nothing is fine


def test_an_include_may_go_up_inside_the_package_it_belongs_to(tmp_path):
    top = tmp_path / "mypkg"
    write(top / "__init__.py", "")
    write(top / "sub" / "__init__.py", "")
    flow = write(top / "sub" / "flows.py", "X = 1\n")
    write(top / "data" / "a.csv", "1\n")
    assert "mypkg/data/a.csv" in names(flow, ("../data/*.csv",))


def test_editing_an_imported_helper_changes_the_digest_and_editing_anything_else_does_not(tmp_path):
    flow = project(tmp_path)
    before = package_digest(str(flow))
    write(tmp_path / "unrelated.py", "UNUSED = 2\n")
    write(tmp_path / "notes.txt", "new\n")
    assert package_digest(str(flow)) == before
    write(tmp_path / "helpers.py", "OFFSET = 2\n")
    assert package_digest(str(flow)) != before


def test_editing_an_included_data_file_changes_the_digest(tmp_path):
    flow = project(tmp_path)
    write(tmp_path / "configs" / "a.yaml", "lr: 1\n")
    before = package_digest(str(flow), ["configs/*.yaml"])
    write(tmp_path / "configs" / "a.yaml", "lr: 2\n")
    assert package_digest(str(flow), ["configs/*.yaml"]) != before
    assert package_digest(str(flow)) != before  # without the include, another package


def test_a_file_that_vanishes_while_packing_is_named(tmp_path, monkeypatch):
    flow = project(tmp_path)
    data = write(tmp_path / "data" / "a.csv", "1\n")
    listing = package._listing

    def listed_then_removed(*args):  # type: ignore[no-untyped-def]
        found = listing(*args)
        data.unlink()
        return found

    monkeypatch.setattr(package, "_listing", listed_then_removed)
    with pytest.raises(PackageError, match=r"data/a\.csv .*vanished"):
        pack(str(flow), ["data/*.csv"])


# -- the memo ------------------------------------------------------------------------------------------------


def test_an_unchanged_tree_is_digested_without_reading_or_zipping_anything(tmp_path, monkeypatch):
    flow = project(tmp_path)
    write(tmp_path / "data" / "a.csv", "1\n")
    settle()
    digest = package_digest(str(flow), ["data/*.csv"])

    def refuse(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("read or zipped again")

    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(package, "open", refuse, raising=False)
    monkeypatch.setattr(package, "_archive", refuse)
    assert package_digest(str(flow), ["data/*.csv"]) == digest


def test_a_changed_file_changes_the_digest_even_with_its_size_and_mtime_restored(tmp_path):
    flow = project(tmp_path)
    helper = tmp_path / "helpers.py"
    settle()
    before = package_digest(str(flow))
    status = helper.stat()
    helper.write_text("OFFSET = 7\n")  # the same size
    os.utime(helper, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert helper.stat().st_size == status.st_size and helper.stat().st_mtime_ns == status.st_mtime_ns
    after = package_digest(str(flow))
    assert after != before and after == pack(str(flow)).digest


def test_a_file_changed_moments_ago_is_read_again_since_its_stat_state_may_not_show_a_second_change(tmp_path,
                                                                                                      monkeypatch):
    monkeypatch.setattr(imports, "SETTLE_NS", 3_600 * 10**9)  # every file counts as changed moments ago
    flow = project(tmp_path)
    package_digest(str(flow))
    monkeypatch.setattr(package, "_archive", lambda _files: (_ for _ in ()).throw(AssertionError("zipped")))
    with pytest.raises(AssertionError, match="zipped"):
        package_digest(str(flow))


# -- unpacking -----------------------------------------------------------------------------------------------


def test_unpack_writes_the_files_byte_for_byte_readable_by_everyone(tmp_path):
    top = tmp_path / "src" / "mypkg"
    write(top / "__init__.py", "")
    flow = write(top / "flows.py", "from mypkg import blob\n")
    write(top / "blob.py", "X = 1\n")
    write(top / "data" / "weights.bin", bytes(range(256)) * 40)
    packed = pack(str(flow), ["data/*.bin"])
    old_umask = os.umask(0o077)
    try:
        files = unpack(packed.data, tmp_path / "out")
    finally:
        os.umask(old_umask)
    assert files == list(packed.files)
    for name, source in package_files(str(flow), ["data/*.bin"]):
        written = tmp_path / "out" / name
        assert written.read_bytes() == source.read_bytes()
        assert stat.S_IMODE(written.stat().st_mode) == 0o644
    for folder in (tmp_path / "out", tmp_path / "out" / "mypkg", tmp_path / "out" / "mypkg" / "data"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    (tmp_path / "empty").mkdir()
    assert unpack(packed.data, tmp_path / "empty") == list(packed.files)  # an empty folder will do too


@pytest.mark.parametrize(("entries", "why"), [
    ([("../escape.py", b"x")], "not a plain relative path"),
    (([("/etc/cron.d/x", b"x")]), "not a plain relative path"),
    ([("a\\..\\..\\x", b"x")], "not a plain relative path"),
    ([("a//b.py", b"x")], "not a plain relative path"),
    ([("ok.py", b"1"), ("ok.py", b"2")], "given twice"),
    ([("a", b"1"), ("a/b.py", b"2")], "given twice"),
])
def test_unpack_refuses_names_that_could_land_outside_its_folder(tmp_path, entries, why):
    duplicated = len({name for name, _ in entries}) < len(entries)
    with pytest.warns(UserWarning, match="Duplicate name") if duplicated else contextlib.nullcontext():
        data = archive_of(entries)
    with pytest.raises(PackageError, match=why):
        unpack(data, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape.py").exists()


def test_unpack_refuses_links_folders_and_compressed_entries(tmp_path):
    with pytest.raises(PackageError, match="not a regular file"):
        unpack(archive_of([("link", b"/etc/passwd")], mode=0o120777), tmp_path / "out")
    with pytest.raises(PackageError, match="compressed or encrypted"):
        unpack(archive_of([("a.py", b"x" * 1000)], compression=zipfile.ZIP_DEFLATED), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unpack_refuses_more_bytes_than_its_bound_before_writing_any(tmp_path):
    data = archive_of([("a.bin", b"\0" * 600), ("b.bin", b"\0" * 600)])
    with pytest.raises(PackageError, match="more than 1 KB"):
        unpack(data, tmp_path / "out", max_bytes=1000)
    assert not (tmp_path / "out").exists()
    assert len(unpack(data, tmp_path / "out", max_bytes=1200)) == 2


@pytest.mark.parametrize("damage", ["not a zip", "truncated", "crc"])
def test_unpack_of_damaged_bytes_is_a_package_error_and_writes_nothing(tmp_path, damage):
    data = archive_of([("a.py", b"A = 1\n"), ("b.py", b"B = 2\n")])
    damaged = {"not a zip": b"<html>404</html>", "truncated": data[: len(data) // 2],
               "crc": data.replace(b"B = 2", b"B = 3")}[damage]
    with pytest.raises(PackageError, match="not a sound code package"):
        unpack(damaged, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    if damage != "crc":
        with pytest.raises(PackageError):
            read_files(damaged)


def test_unpack_refuses_a_folder_that_holds_something(tmp_path):
    write(tmp_path / "out" / "old.py", "")
    with pytest.raises(PackageError, match="not an empty folder"):
        unpack(archive_of([("a.py", b"1")]), tmp_path / "out")


def test_largest_names_the_biggest_files_for_a_message():
    files = [PackedFile("flows.py", 2048), PackedFile("big.bin", 12_000_000), PackedFile("tiny", 12),
             PackedFile("data.csv", 3_100_000)]
    assert largest(files) == "big.bin (12.0 MB), data.csv (3.1 MB), flows.py (2 KB)"
    assert largest(files, count=10).endswith("tiny (12 B)")
    assert largest([PackedFile("huge", 2_500_000_000)]) == "huge (2.5 GB)"
    assert largest([]) == ""
