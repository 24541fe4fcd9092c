"""The codec registry: lookup by type (and base), by name, registration, entry points; nothing imported early."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fluksio.codecs
from fluksio.codecs import Codec, CodecRegistry
from fluksio.codecs.registry import ENTRY_POINT_GROUP, from_bytes_functions
from fluksio.errors import CodecError


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y


class Point3(Point):
    pass


def point_codec(name: str = "point") -> Codec:
    return from_bytes_functions(Point, name, lambda p: f"{p.x},{p.y}".encode(),
                                lambda data: Point(*map(int, data.decode().split(","))), suffix=".txt")


@pytest.fixture
def registry() -> CodecRegistry:
    return CodecRegistry(load_entry_points=False)


def test_a_codec_is_found_by_its_type_and_by_the_types_subclasses(registry):
    codec = registry.add(point_codec())
    assert registry.for_type(Point) is codec and registry.for_type(Point3) is codec
    assert registry.for_type(int) is None
    assert registry.named("point") is codec


def test_a_subclass_codec_wins_over_its_bases(registry):
    base = registry.add(point_codec())
    sub = registry.add(from_bytes_functions(Point3, "point3", lambda p: b"", lambda d: Point3(0, 0)))
    assert registry.for_type(Point3) is sub and registry.for_type(Point) is base


def test_registering_again_replaces_the_codec_and_what_was_answered_before(registry):
    registry.add(point_codec())
    assert registry.for_type(Point).suffix == ".txt"
    again = registry.add(Codec("point", Point, lambda v, f: None, lambda p: None, suffix=".pt"))
    assert registry.for_type(Point) is again and registry.named("point") is again
    assert registry.names() == ["point"]


@pytest.mark.parametrize("name", ["", "Point", "1abc", "a b", "x" * 65, None])
def test_a_bad_codec_name_is_refused_saying_what_names_look_like(registry, name):
    with pytest.raises(CodecError, match="is not valid; use lowercase letters"):
        registry.add(Codec(name, Point, lambda v, f: None, lambda p: None))  # type: ignore[arg-type]


def test_a_type_given_by_name_must_say_its_module(registry):
    with pytest.raises(CodecError, match="must be 'package.module:attr'"):
        registry.add(Codec("lazy", "numpy.ndarray", lambda v, f: None, lambda p: None))
    with pytest.raises(CodecError, match="its type must be a class"):
        registry.add(Codec("inst", Point(1, 2), lambda v, f: None, lambda p: None))  # type: ignore[arg-type]


def test_an_unknown_codec_name_says_how_to_get_one(registry):
    registry.add(point_codec())
    with pytest.raises(CodecError) as info:
        registry.named("torch")
    message = str(info.value)
    assert "no codec named 'torch' is registered in this process (registered: point)" in message
    assert "fluksio.codecs.register" in message and ENTRY_POINT_GROUP in message


def test_an_encode_function_that_returns_no_bytes_is_refused_naming_the_codec(tmp_path):
    codec = from_bytes_functions(Point, "bad", lambda p: "text", lambda d: None)
    with open(tmp_path / "f", "wb") as handle, pytest.raises(CodecError, match=r"whose codec 'bad' returned str"):
        codec.write(Point(1, 2), handle)


def test_the_builtins_are_registered_by_name_and_type():
    import numpy as np
    import pandas as pd

    assert fluksio.codecs.codec_for(np.zeros(2)).name == "numpy"
    assert fluksio.codecs.codec_for(pd.DataFrame()).name == "pandas"
    assert fluksio.codecs.codec_for(pd.Series(dtype=float)).name == "pandas.series"
    assert fluksio.codecs.codec_for(b"x").name == "bytes"
    assert fluksio.codecs.codec_for(np.bytes_(b"x")).name == "bytes"  # a subclass of bytes
    assert fluksio.codecs.codec_for(1.5) is None


def test_registering_the_builtins_and_looking_up_imports_neither_numpy_nor_pandas():
    code = textwrap.dedent("""
        import sys
        import fluksio.codecs
        from fluksio.execution.values import encode
        from fluksio.artifacts import MemoryArtifactStore
        assert fluksio.codecs.codec_for(object()) is None and fluksio.codecs.codec_for(b"x").name == "bytes"
        encode({"a": [1, 2.5, "x"], "b": b"raw"}, MemoryArtifactStore(), [], "w")
        print(sorted(m for m in ("numpy", "pandas", "pyarrow") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_codecs_of_installed_packages_come_from_the_entry_point_group(tmp_path, monkeypatch):
    package = tmp_path / "pointcodec.py"
    package.write_text(textwrap.dedent("""
        from fluksio.codecs import Codec

        class Vec:
            pass

        def codecs():
            return [Codec("vec", Vec, lambda v, f: f.write(b"v"), lambda p: Vec())]

        BROKEN = property()
    """))
    dist = tmp_path / "pointcodec-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pointcodec\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nvec = pointcodec:codecs\n"
                                           "broken = pointcodec:BROKEN\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = CodecRegistry()
    vec = registry.named("vec")  # loaded on the first lookup that needs it; the broken one is only logged
    import pointcodec

    assert vec.type is pointcodec.Vec and registry.for_type(pointcodec.Vec) is vec
    monkeypatch.delitem(sys.modules, "pointcodec")


def test_a_user_codec_round_trips_through_a_store(tmp_path):
    from fluksio.artifacts import LocalArtifactStore
    from fluksio.codecs import load_value, store_value

    registry = CodecRegistry(load_entry_points=False)
    codec = registry.add(point_codec())
    store = LocalArtifactStore(tmp_path)
    artifact, ref = store_value(Point(3, 4), codec, store, "where")
    assert ref["$artifact"]["codec"] == "point" and artifact.name == "where.txt"
    assert store.get(artifact.digest) == b"3,4"
    back = load_value(ref, store, registry)
    assert isinstance(back, Point) and (back.x, back.y) == (3, 4)
    assert Path(store.path(artifact.digest)).read_bytes() == b"3,4"


def test_a_type_named_in_a_package_still_being_imported_is_looked_for_again(registry, monkeypatch):
    import types

    package = types.ModuleType("halfpkg")
    monkeypatch.setitem(sys.modules, "halfpkg", package)  # imported, but its class not defined yet

    class Thing:
        pass

    codec = registry.add(Codec("thing", "halfpkg:Thing", lambda v, f: None, lambda p: None))
    assert registry.for_type(Thing) is None  # not there yet, and that answer is not kept
    package.Thing = Thing
    assert registry.for_type(Thing) is codec


def test_a_type_named_in_a_package_never_imported_is_not_imported_for_a_lookup(registry):
    registry.add(Codec("ghost", "no_such_package_anywhere:Thing", lambda v, f: None, lambda p: None))
    assert registry.for_type(Point) is None
    assert "no_such_package_anywhere" not in sys.modules
