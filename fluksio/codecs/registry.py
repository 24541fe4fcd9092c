"""Codecs: how a value of a type becomes bytes in the artifact store and back, by name. Never pickle.

A codec has a name (written into the value's reference, so that any machine can
decode it), the type it carries, and a pair of functions: ``write(value, file)``
puts the encoding into a binary file, ``read(path)`` makes the value from a file.
The registry finds the codec of a value by the value's type (its class, then its
bases in method-resolution order) and the codec of a reference by its name.

A built-in codec names its type as ``"package:attr"`` (``"numpy:ndarray"``), so
registering it imports nothing: the type is looked up only once its package has
been imported by someone else, and no value can be of a type whose package was
never imported. Codecs of installed packages come from the entry-point group
``fluksio.codecs``, loaded once, the first time a lookup needs them.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, BinaryIO

from fluksio.errors import CodecError

log = logging.getLogger(__name__)

#: The entry-point group through which an installed package adds codecs.
ENTRY_POINT_GROUP = "fluksio.codecs"
#: A codec's name: it is stored in ``run_artifacts.codec`` (64 characters) and in every reference.
CODEC_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Codec:
    """One encoding of one type.

    ``type``: the class (its subclasses are carried too), or ``"package.module:attr"`` naming it without
    importing it. ``write(value, file)`` writes the encoding to a binary file (it may be large: write it in
    pieces). ``read(path)`` returns the value from a file holding what ``write`` wrote. ``suffix`` ends the
    artifact's file name (``".npy"``); ``extra`` is the pip extra that brings what the codec needs, named in
    errors when it is missing.
    """

    name: str
    type: type | str
    write: Callable[[Any, BinaryIO], None] = field(repr=False)
    read: Callable[[Path], Any] = field(repr=False)
    media_type: str = "application/octet-stream"
    suffix: str = ""
    extra: str | None = None

    @property
    def type_name(self) -> str:
        """``numpy.ndarray``: the carried type as messages name it."""
        if isinstance(self.type, str):
            module, _, attr = self.type.partition(":")
            return f"{module.split('.')[0]}.{attr}"
        return f"{self.type.__module__}.{self.type.__qualname__}"


def from_bytes_functions(type_: type | str, name: str, encode: Callable[[Any], bytes],
                         decode: Callable[[bytes], Any], media_type: str = "application/octet-stream",
                         suffix: str = "") -> Codec:
    """A codec from a pair of functions over whole ``bytes``: the simple form users register."""

    def write(value: Any, file: BinaryIO) -> None:
        data = encode(value)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CodecError(f"is a {type(value).__module__}.{type(value).__qualname__}, whose codec {name!r} "
                             f"returned {type(data).__name__} from its encode function instead of bytes")
        file.write(data)

    def read(path: Path) -> Any:
        return decode(path.read_bytes())

    return Codec(name=name, type=type_, write=write, read=read, media_type=media_type, suffix=suffix)


class CodecRegistry:
    """Codecs by name and by type; thread-safe. One per process (:data:`REGISTRY`); tests make their own."""

    def __init__(self, load_entry_points: bool = True) -> None:
        self._by_name: dict[str, Codec] = {}
        self._by_type: dict[type, Codec] = {}
        #: Codecs whose type is still a ``"package:attr"`` name, waiting for the package to be imported.
        self._unresolved: dict[str, Codec] = {}
        #: The answer for each type asked about so far (``None``: no codec); cleared by every registration.
        self._answers: dict[type, Codec | None] = {}
        self._entry_points_loaded = not load_entry_points
        self._lock = threading.RLock()

    def add(self, codec: Codec) -> Codec:
        """Register ``codec``; a codec of the same name registered before is replaced (a module imported again,
        a notebook cell run again), and so is any codec registered for the same type."""
        if not isinstance(codec, Codec):
            raise CodecError(f"expected a fluksio.codecs.Codec, got {type(codec).__name__}")
        if not isinstance(codec.name, str) or not CODEC_NAME.fullmatch(codec.name):
            raise CodecError(f"codec name {codec.name!r} is not valid; use lowercase letters, digits, '_', '.' or "
                             "'-', starting with a letter, at most 64 characters (e.g. 'torch.safetensors')")
        if isinstance(codec.type, str):
            if ":" not in codec.type:
                raise CodecError(f"codec {codec.name!r}: a type given by name must be 'package.module:attr', "
                                 f"got {codec.type!r}")
        elif not isinstance(codec.type, type):
            raise CodecError(f"codec {codec.name!r}: its type must be a class, got {codec.type!r}")
        if not callable(codec.write) or not callable(codec.read):
            raise CodecError(f"codec {codec.name!r}: write and read must be functions")
        with self._lock:
            self._forget(codec.name)
            self._by_name[codec.name] = codec
            if isinstance(codec.type, str):
                self._unresolved[codec.name] = codec
            else:
                self._by_type[codec.type] = codec  # the newest codec of a type is the one that encodes it
            self._answers.clear()
        return codec

    def _forget(self, name: str) -> None:
        old = self._by_name.pop(name, None)
        self._unresolved.pop(name, None)
        if old is not None:
            for type_, codec in list(self._by_type.items()):
                if codec is old:
                    del self._by_type[type_]

    def named(self, name: str) -> Codec:
        """The codec called ``name``; :class:`CodecError` saying how to get it when none is registered here."""
        with self._lock:
            found = self._by_name.get(name)
        if found is None and self._load_entry_points():
            with self._lock:
                found = self._by_name.get(name)
        if found is None:
            known = ", ".join(sorted(self._by_name)) or "none"
            raise CodecError(f"no codec named {name!r} is registered in this process (registered: {known}); "
                             "register it with fluksio.codecs.register(...) in a module this process imports (the "
                             f"flows module named in FLUKSIO_FLOWS), or install the package whose "
                             f"{ENTRY_POINT_GROUP!r} entry point provides it")
        return found

    def for_type(self, type_: type) -> Codec | None:
        """The codec that carries values of ``type_`` (its own, else that of its nearest base); ``None``: none."""
        try:
            return self._answers[type_]
        except KeyError:
            pass
        found, settled = self._search(type_)
        if found is None and self._load_entry_points():
            found, settled = self._search(type_)
        if settled:
            with self._lock:
                self._answers[type_] = found
        return found

    def _search(self, type_: type) -> tuple[Codec | None, bool]:
        """The codec for ``type_``, and whether the answer is final (no codec's type is still to be found in a
        package that has been imported)."""
        with self._lock:
            settled = self._resolve_imported()
            for base in type_.__mro__:
                codec = self._by_type.get(base)
                if codec is not None:
                    return codec, True
        return None, settled

    def _resolve_imported(self) -> bool:
        """Turn ``"package:attr"`` types into classes, for packages imported by now (never importing one);
        whether every such package's type was found."""
        settled = True
        for name, codec in list(self._unresolved.items()):
            assert isinstance(codec.type, str)
            module_name, _, attr = codec.type.partition(":")
            if module_name.split(".")[0] not in sys.modules:
                continue
            try:
                resolved = getattr(import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                # Perhaps the package is half-way through being imported by another thread: ask again later.
                log.debug("codec %r: its type %s is not there yet: %s", name, codec.type, exc)
                settled = False
                continue
            del self._unresolved[name]
            self._by_type.setdefault(resolved, codec)
        return settled

    def _load_entry_points(self) -> bool:
        """Register the codecs installed packages declare, once; whether this call did (and found any)."""
        with self._lock:
            if self._entry_points_loaded:
                return False
            self._entry_points_loaded = True
        points = list(entry_points(group=ENTRY_POINT_GROUP))
        for point in points:
            try:
                for codec in _codecs_of(point.load()):  # a function may also have registered codecs itself
                    self.add(codec)
            except Exception as exc:  # one broken package must not stop every value of every other type
                log.warning("entry point %s = %s of group %r could not be loaded: %s: %s", point.name,
                            point.value, ENTRY_POINT_GROUP, type(exc).__name__, exc)
        return bool(points)

    def names(self) -> list[str]:
        self._load_entry_points()
        with self._lock:
            return sorted(self._by_name)


def _codecs_of(target: Any) -> Iterable[Codec]:
    """What an entry point names: a :class:`Codec`, a list of them, or a function returning either."""
    if isinstance(target, Codec):
        return [target]
    if callable(target) and not isinstance(target, type):
        target = target()
        if target is None:  # a function that registered its codecs itself
            return []
        if isinstance(target, Codec):
            return [target]
    if isinstance(target, (list, tuple)) and all(isinstance(c, Codec) for c in target):
        return list(target)
    raise CodecError(f"expected a Codec, a list of Codecs, or a function returning them; got {target!r}")


#: This process's codecs: the built-ins (added by ``fluksio.codecs``), the user's, and the installed packages'.
REGISTRY = CodecRegistry()
