"""Code packages: the code of a run as one deterministic zip archive, named by its sha256.

A run's code travels to workers on other hosts as an archive they fetch from the artifact store
and import. Its digest is the code digest (flows/source.py): what a run is claimed with, what its
cache entries are keyed on and what a worker compares a call against. So the same files must make
the same bytes on every machine, whatever their mtimes, the umask, the order a folder lists them
in or where the project is checked out: entries are stored uncompressed, sorted by path, each with
one fixed date and mode, and nothing else.

What is packed:

* the flow file and the ``.py`` files of its source tree that it imports, with the ``__init__.py`` of
  the packages on the way (flows/imports.py follows the imports);
* the regular files that the flow's ``include`` globs match, relative to the flow file's folder
  (``**`` matches any depth of folders; a trailing ``**`` every file below, as Python 3.13 has it).

The source tree is the flow file's folder, or the top of the package it is in (``imports.root_of``).
Paths in the archive are relative to that folder when it is a plain folder, and to its parent when
it is a package, so that a worker that puts the unpacked folder first on ``sys.path`` imports
``mypkg.flows`` as the submitter did. Never packed, even when included: dot files and folders
(``.git``, ``.venv``, ``.fluksio``), ``__pycache__``, ``*.pyc``, ``node_modules`` and virtual
environments of any name (a folder holding ``pyvenv.cfg``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import io
import os
import re
import stat
import struct
import threading
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fluksio.errors import FlowError, FluksioError
from fluksio.flows.imports import Contents, StatKey, imported_files, root_of, settled, stat_key

#: The date of every entry: zip's earliest, so that no clock and no mtime reaches the bytes.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
#: The Unix mode of every entry (a regular file, rw-r--r--), whatever the file's own.
ENTRY_MODE = 0o100644
#: ``ZipInfo.create_system`` of Unix: what says the mode above is a Unix mode.
UNIX = 3
#: Most bytes :func:`unpack` writes unless told otherwise: a crafted archive must not fill a worker's disk.
MAX_UNPACKED_BYTES = 1 << 30
#: Folders never packed nor searched, by name; dot folders and virtual environments are not either.
SKIPPED_FOLDERS = frozenset({"__pycache__", "node_modules"})
#: What the registry (flows/registry.py) starts the name of a flow file's module with when it loads the file by
#: path: no importable name, so a worker imports such a flow by its path in the archive.
FLOWFILE_MODULE_PREFIX = "fluksio_flowfile_"

_MAGIC = re.compile(r"[*?\[]")
#: What zipfile (and the struct unpacking under it) raises on bytes that are not a sound zip archive.
_DAMAGED = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError, struct.error)
_digest_memo: dict[tuple[str, tuple[str, ...]], tuple[tuple[tuple[str, StatKey | None], ...], str]] = {}
_memo_lock = threading.Lock()


class PackageError(FluksioError):
    """A code package cannot be made (a file vanished or is unreadable) or is unsafe to unpack."""


@dataclass(frozen=True)
class PackedFile:
    """One file of a code package: its path in the archive ('/'-separated) and its size in bytes."""

    path: str
    size: int


@dataclass(frozen=True)
class CodePackage:
    """A flow's code as an archive: ``digest`` is ``"sha256:<hex>"`` of ``data``; ``files`` sorted by path.

    ``entry`` is what a worker imports: the flow's module name (``"pkg.flows"``) when it is importable by
    that name from the unpacked folder, else the flow file's path in the archive (``"sub/flows.py"``).
    """

    digest: str
    data: bytes
    files: tuple[PackedFile, ...]
    entry: str


def pack(source_file: str, include: Sequence[str] = (), module: str | None = None) -> CodePackage:
    """The code package of the flow defined in ``source_file`` (``module``: its module's name, for ``entry``).

    Raises :class:`PackageError` naming a file that vanished or cannot be read, and ``FlowError`` for an
    include glob that reaches outside the archive's folder.
    """
    contents: Contents = {}
    flow_path, listing = _listing(source_file, tuple(include), contents)
    return _pack(source_file, tuple(include), flow_path, listing, contents, module)


def package_digest(source_file: str, include: Sequence[str] = ()) -> str:
    """``pack(source_file, include).digest``, without reading or zipping anything when no file changed.

    Memoised on the archive path and stat state of every file: an unchanged tree costs a ``stat`` per
    file (and the listing of the folders ``include`` globs search).
    """
    contents: Contents = {}
    flow_path, listing = _listing(source_file, tuple(include), contents)
    state = tuple((path, key) for path, _, key in listing)
    with _memo_lock:
        remembered = _digest_memo.get((source_file, tuple(include)))
    if remembered is not None and remembered[0] == state:  # only states of readable files are remembered
        return remembered[1]
    return _pack(source_file, tuple(include), flow_path, listing, contents, None).digest


def package_files(source_file: str, include: Sequence[str] = ()) -> list[tuple[str, Path]]:
    """``(path in the archive, file on disk)`` of every file :func:`pack` packs, sorted by archive path."""
    return [(path, file) for path, file, _ in _listing(source_file, tuple(include), {})[1]]


def read_files(data: bytes) -> list[PackedFile]:
    """The files of the archive ``data``, in its order (what ``fluksio show`` lists)."""
    with _opened(data) as archive:
        return [PackedFile(entry.filename, entry.file_size) for entry in _checked(archive, MAX_UNPACKED_BYTES)]


def unpack(data: bytes, into: Path, *, max_bytes: int = MAX_UNPACKED_BYTES) -> list[PackedFile]:
    """Write the files of the archive ``data`` under ``into``, which must not exist yet or be empty.

    Every entry is checked before anything is written: a name that would land outside ``into``
    (absolute, ``..``, a backslash), a name given twice, an entry that is not a plain stored file (a
    link, a folder, compressed or encrypted data) or more than ``max_bytes`` in all is refused with a
    :class:`PackageError`, and nothing is written. Files are written 0o644 and folders 0o755, whatever
    the umask. A write that fails (a full disk) leaves what was written: unpack into a scratch folder
    and rename it into place.
    """
    with _opened(data) as archive:
        entries = _checked(archive, max_bytes)
        # Read (and so check every CRC) before the first write: a corrupt archive writes nothing.
        files = [(entry.filename, archive.read(entry)) for entry in entries]
    try:
        if into.exists() and (not into.is_dir() or any(into.iterdir())):
            raise PackageError(f"cannot unpack a code package into {into}: it exists and is not an empty folder")
        into.mkdir(parents=True, exist_ok=True)
        into.chmod(0o755)  # whatever the umask: every user of a worker's code cache reads it
        made = {into}
        for name, content in files:
            target = into.joinpath(*name.split("/"))
            for folder in reversed(target.parents):
                if folder.is_relative_to(into) and folder not in made:
                    folder.mkdir()
                    folder.chmod(0o755)
                    made.add(folder)
            descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(descriptor, "wb") as handle:
                os.fchmod(descriptor, 0o644)
                handle.write(content)
    except OSError as exc:
        raise PackageError(f"cannot unpack a code package into {into}: {exc}") from None
    return [PackedFile(name, len(content)) for name, content in files]


def largest(files: Sequence[PackedFile], count: int = 3) -> str:
    """``big.bin (12.0 MB), data.csv (3.1 MB), flows.py (2 KB)``: the ``count`` largest files, for a message."""
    biggest = sorted(files, key=lambda file: (-file.size, file.path))[:count]
    return ", ".join(f"{file.path} ({_size(file.size)})" for file in biggest)


# -- what is packed -----------------------------------------------------------------------------------


def _listing(source_file: str, include: tuple[str, ...], contents: Contents,
             ) -> tuple[str, list[tuple[str, Path, StatKey | None]]]:
    """The flow file's archive path, and ``(archive path, file, stat state)`` of every file to pack, sorted.

    The stat state is ``None`` for a file that could not be read while imports were followed.
    """
    start = Path(source_file).resolve()
    root = root_of(source_file) or start.parent
    base = root.parent if (root / "__init__.py").is_file() else root
    never = _NeverPacked(base)
    flow_path = start.relative_to(base).as_posix()
    listed: dict[str, tuple[Path, StatKey | None]] = {}
    for file, key in imported_files(root, start, contents).items():
        path = file.relative_to(base).as_posix()
        if file == start or not never(path):
            listed[path] = (file, key)
    for pattern in include:
        for file in _matches(start.parent, pattern, base):
            path = file.relative_to(base).as_posix()
            if path in listed or never(path):
                continue
            try:
                status = os.stat(file)
            except OSError:  # a dangling link, or gone since the folder was listed: not there
                continue
            if stat.S_ISREG(status.st_mode):
                listed[path] = (file, stat_key(status))
    return flow_path, sorted((path, file, key) for path, (file, key) in listed.items())


def _matches(anchor: Path, pattern: str, base: Path) -> list[Path]:
    """The paths ``pattern`` matches below ``anchor``, made plain (no ``..``); each must be below ``base``."""
    parts = tuple(part for part in PurePosixPath(pattern).parts if part not in ("", "."))
    if not parts or PurePosixPath(pattern).is_absolute():
        raise FlowError(f"include={pattern!r} is not a glob relative to the flow's file; give paths like "
                        "'configs/*.yaml' or 'data/**/*.csv' below the flow's folder")
    if parts[-1] == "**":
        parts += ("*",)
    found = []
    for match in _glob(anchor, parts):
        plain = Path(os.path.normpath(match))
        if not plain.is_relative_to(base):
            raise FlowError(f"include={pattern!r} matches {plain}, outside {base}, the folder the code package "
                            "is made of; include only files below it")
        found.append(plain)
    return found


def _glob(folder: Path, parts: tuple[str, ...]) -> Iterator[Path]:
    """pathlib's glob, but ``**`` never descends into what is never packed (a ``.venv`` is not walked)."""
    if not parts:
        yield folder
        return
    part, rest = parts[0], parts[1:]
    if part == "**":
        yield from _glob(folder, rest)
        for entry in _entries(folder):
            if entry.is_dir(follow_symlinks=False) and not _skipped_folder(Path(entry.path)):
                yield from _glob(Path(entry.path), parts)
    elif not _MAGIC.search(part):  # a plain name: no need to list the folder
        yield from _glob(folder / part, rest)
    else:
        for entry in _entries(folder):
            if fnmatch.fnmatchcase(entry.name, part):
                yield from _glob(Path(entry.path), rest)


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError:  # missing, not a folder, unreadable: nothing to match
        return []


def _skipped_folder(folder: Path) -> bool:
    return (folder.name.startswith(".") or folder.name in SKIPPED_FOLDERS
            or (folder / "pyvenv.cfg").is_file())


class _NeverPacked:
    """Whether an archive path is one that is never packed; remembers which folders are virtual environments."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.venvs: dict[str, bool] = {}

    def __call__(self, path: str) -> bool:
        parts = path.split("/")
        if path.endswith(".pyc") or any(part.startswith(".") or part in SKIPPED_FOLDERS for part in parts):
            return True
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder not in self.venvs:
                self.venvs[folder] = self.base.joinpath(folder, "pyvenv.cfg").is_file()
            if self.venvs[folder]:
                return True
        return False


# -- the archive --------------------------------------------------------------------------------------


def _pack(source_file: str, include: tuple[str, ...], flow_path: str, listing: list[tuple[str, Path, StatKey | None]],
          contents: Contents, module: str | None) -> CodePackage:
    files: list[tuple[str, bytes]] = []
    state: list[tuple[str, StatKey | None]] = []
    for path, file, _ in listing:
        key, content = contents.get(file) or _read_file(path, file)
        files.append((path, content))
        state.append((path, key))
    data = _archive(files)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if all(key is not None and settled(key) for _, key in state):
        with _memo_lock:
            _digest_memo[(source_file, include)] = (tuple(state), digest)
    return CodePackage(digest, data, tuple(PackedFile(path, len(content)) for path, content in files),
                       _entry(module, flow_path))


def _read_file(path: str, file: Path) -> tuple[StatKey, bytes]:
    """The stat state of ``file`` (taken before the read: a change during it shows next time) and its bytes."""
    try:
        with open(file, "rb") as handle:
            status = os.fstat(handle.fileno())
            if not stat.S_ISREG(status.st_mode):
                raise PackageError(f"cannot pack {path} ({file}) into a code package: it is no longer a file")
            return stat_key(status), handle.read()
    except FileNotFoundError:
        raise PackageError(f"cannot pack {path} ({file}) into a code package: it vanished") from None
    except OSError as exc:
        raise PackageError(f"cannot pack {path} ({file}) into a code package: {exc.strerror or exc}") from None


def _archive(files: Sequence[tuple[str, bytes]]) -> bytes:
    """The zip of ``files`` (sorted by path): the same files make the same bytes anywhere."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path, content in files:
            entry = zipfile.ZipInfo(path, date_time=ZIP_DATE)
            entry.create_system = UNIX
            entry.external_attr = ENTRY_MODE << 16
            archive.writestr(entry, content)
    return buffer.getvalue()


def _entry(module: str | None, flow_path: str) -> str:
    """The flow's module name when importing it by that name from the unpacked folder finds the flow file."""
    if (not module or module == "__main__" or module.startswith(FLOWFILE_MODULE_PREFIX)
            or not all(part.isidentifier() for part in module.split("."))):
        return flow_path
    implied = module.replace(".", "/")
    return module if flow_path in (implied + ".py", implied + "/__init__.py") else flow_path


@contextlib.contextmanager
def _opened(data: bytes) -> Iterator[zipfile.ZipFile]:
    """The archive ``data`` opened for reading; what zipfile raises about damaged bytes is a PackageError."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise PackageError(f"a code package is bytes, not {type(data).__name__}")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            yield archive
    except _DAMAGED as exc:  # never a traceback from deep inside zipfile: say what the bytes are not
        raise PackageError(f"not a sound code package (zip archive): {exc}") from None


def _checked(archive: zipfile.ZipFile, max_bytes: int) -> list[zipfile.ZipInfo]:
    """The entries of ``archive``, each a plain stored file with a safe relative name; else a PackageError."""
    names: set[str] = set()
    folders: set[str] = set()
    total = 0
    entries = archive.infolist()
    for entry in entries:
        name = entry.filename
        parts = name.split("/")
        if (not name or name.startswith("/") or "\\" in name
                or any(part in ("", ".", "..") for part in parts)):
            raise PackageError(f"code package refused: entry {name!r} is not a plain relative path")
        mode = entry.external_attr >> 16
        if mode and not stat.S_ISREG(mode):
            raise PackageError(f"code package refused: entry {name!r} is not a regular file (mode {mode:o})")
        if entry.compress_type != zipfile.ZIP_STORED or entry.flag_bits & 0x1 or entry.compress_size != entry.file_size:
            raise PackageError(f"code package refused: entry {name!r} is compressed or encrypted; code packages "
                               "store their files as they are")
        prefixes = {"/".join(parts[:depth]) for depth in range(1, len(parts))}
        if name in names or name in folders or prefixes & names:
            raise PackageError(f"code package refused: entry {name!r} is given twice (or as a file and a folder)")
        names.add(name)
        folders |= prefixes
        total += entry.file_size
        if total > max_bytes:
            raise PackageError(f"code package refused: its files hold more than {_size(max_bytes)} "
                               f"(largest: {largest([PackedFile(e.filename, e.file_size) for e in entries])})")
    return entries


def _size(size: int) -> str:
    """``512 B``, ``2 KB``, ``3.1 MB``: a size in bytes as people read it (powers of 1000)."""
    for unit, scale in (("GB", 1000**3), ("MB", 1000**2)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 1000:.0f} KB" if size >= 1000 else f"{size} B"
