"""The built-in codecs on a real folder store: arrays and frames come back equal, of the same type and dtype;
what they cannot carry without pickle is refused, naming why; a missing package names the extra."""

from __future__ import annotations

import gc
import io
import sys
from datetime import datetime, timezone

import blake3
import numpy as np
import pandas as pd
import pytest

from fluksio.artifacts import LocalArtifactStore, MemoryArtifactStore
from fluksio.codecs import codec_for, load_value, mapped, store_value
from fluksio.codecs.builtin import MAP_BYTES, read_npy
from fluksio.errors import CodecError


@pytest.fixture
def store(tmp_path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


def round_trip(value, store):
    artifact, ref = store_value(value, codec_for(value), store, "v")
    return load_value(ref, store), artifact, ref


@pytest.mark.parametrize("array", [
    np.arange(10.0), np.arange(12, dtype=np.int32).reshape(3, 4), np.array([True, False]),
    np.array([1 + 2j]), np.array(["2026-01-02T03:04", "NaT"], dtype="datetime64[s]"), np.array(["ä", "bc"]),
    np.zeros(3, dtype=[("x", "f8"), ("n", "i2")]), np.array(7.5), np.empty((0, 3)),
    np.asfortranarray(np.arange(6.0).reshape(2, 3)), np.arange(20.0)[::3], np.array([np.nan, np.inf]),
])
def test_numpy_arrays_come_back_equal_with_their_dtype_and_shape(array, store):
    back, artifact, ref = round_trip(array, store)
    assert type(back) is np.ndarray and back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    assert ref["$artifact"]["codec"] == "numpy" and ref["$artifact"]["media_type"] == "application/x-npy"
    assert artifact.name == "v.npy"


def test_the_digest_is_the_stored_files_blake3_and_equal_arrays_share_it(store):
    _, first, _ = round_trip(np.arange(1000.0), store)
    _, second, _ = round_trip(np.arange(1000.0), store)
    _, other, _ = round_trip(np.arange(1001.0), store)
    path = store.path(first.digest)
    assert first.digest == "blake3:" + blake3.blake3(path.read_bytes()).hexdigest()
    assert path == store.root / "blake3" / first.digest[7:9] / first.digest[7:]
    assert first.size == path.stat().st_size
    assert second.digest == first.digest and other.digest != first.digest
    assert not list((store.root / "tmp").iterdir())  # written through a temporary file, renamed, none left


@pytest.mark.parametrize("array, words", [
    (np.array([1, "a", None], dtype=object), "dtype object"),
    (np.ma.masked_array([1, 2], mask=[0, 1]), "numpy.ma.MaskedArray; the numpy codec carries plain arrays"),
])
def test_what_npy_cannot_carry_without_pickle_is_refused(array, words, store):
    with pytest.raises(CodecError, match=words):
        store_value(array, codec_for(array), store, "v")
    assert not list(store.root.rglob("blake3/*/*"))


def test_a_dataframe_with_datetimes_comes_back_equal(store):
    frame = pd.DataFrame({
        "when": pd.date_range("2026-01-01", periods=4, freq="D"),
        "utc": pd.date_range("2026-01-01", periods=4, freq="h", tz="UTC"),
        "x": [0.5, np.nan, 2.5, 3.0], "n": [1, 2, 3, 4], "s": ["a", "b", None, "d"],
        "c": pd.Categorical(["u", "v", "u", "v"]),
    }, index=pd.Index([10, 20, 30, 40], name="step"))
    back, artifact, ref = round_trip(frame, store)
    assert type(back) is pd.DataFrame
    pd.testing.assert_frame_equal(back, frame)
    assert ref["$artifact"]["codec"] == "pandas" and artifact.name == "v.parquet"


@pytest.mark.parametrize("name", ["loss", None, 3])
def test_a_series_comes_back_with_its_name(name, store):
    series = pd.Series([1.0, 2.0, 3.0], index=["a", "b", "c"], name=name)
    back, _, ref = round_trip(series, store)
    assert ref["$artifact"]["codec"] == "pandas.series"
    pd.testing.assert_series_equal(back, series)


def test_a_dataframe_with_a_python_object_column_is_refused_naming_the_column(store):
    frame = pd.DataFrame({"fine": [1, 2], "objects": [object(), object()]})
    with pytest.raises(CodecError) as info:
        store_value(frame, codec_for(frame), store, "v")
    message = str(info.value)
    assert message.startswith("is a pandas DataFrame that Parquet cannot hold")
    assert "column objects" in message and ".astype(str)" in message


def test_a_dataframe_subclass_is_refused_rather_than_coming_back_plain(store):
    class Frame(pd.DataFrame):
        pass

    with pytest.raises(CodecError, match="a subclass of pandas DataFrame; it would come back as a plain DataFrame"):
        store_value(Frame({"x": [1]}), codec_for(Frame({"x": [1]})), store, "v")


def test_without_pyarrow_a_frame_fails_naming_the_extra(store, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError now
    frame = pd.DataFrame({"x": [1]})
    with pytest.raises(CodecError, match=r"needs the package 'pyarrow', which is not installed here: "
                                         r"pip install 'fluksio\[data\]'"):
        store_value(frame, codec_for(frame), store, "v")


def test_a_machine_without_numpy_fails_to_read_an_array_naming_the_extra(store, monkeypatch):
    _, artifact, _ = round_trip(np.arange(3), store)
    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(CodecError, match=r"reading a numpy array \(.npy\) needs the package 'numpy'.*fluksio\[data\]"):
        read_npy(store.path(artifact.digest))


def test_bytes_and_a_store_without_files_of_its_own(tmp_path):
    store = MemoryArtifactStore()  # put_stream's default: a temporary file, then put
    back, artifact, _ = round_trip(b"\x00\x01 raw", store)
    assert back == b"\x00\x01 raw" and artifact.size == 6
    moment = datetime(2026, 1, 2, tzinfo=timezone.utc)
    frame_back, _, _ = round_trip(pd.DataFrame({"t": [moment]}), store)
    assert frame_back["t"].iloc[0] == moment


def test_a_failing_write_leaves_nothing_in_the_store(store):
    class Boom(Exception):
        pass

    def write(file):
        file.write(b"half")
        raise Boom()

    with pytest.raises(Boom):
        store.put_stream(write, name="x")
    assert not list(store.root.rglob("*.tmp*")) and not list(store.root.rglob("blake3/*/*"))
    assert not list((store.root / "tmp").iterdir())


@pytest.mark.parametrize("array", [
    np.arange(10.0), np.arange(12, dtype=np.int32).reshape(3, 4), np.array(7.5), np.empty((0, 3)),
    np.asfortranarray(np.arange(6.0).reshape(2, 3)), np.arange(20.0)[::3], np.zeros(3, dtype=[("x", "f8")]),
    np.array(["2026-01-02", "NaT"], dtype="datetime64[D]"), np.array(["ä", "bc"]), np.ones((2, 3, 4), order="F"),
    np.arange(5, dtype=">i4"), np.array(["ab"], dtype=">U3"), np.array([1 + 2j], dtype=">c8"),
    np.array([True, False]), np.array([b"ab"], dtype="S3"), np.zeros(2, dtype="V4"), np.arange(3, dtype="f2"),
])
def test_an_array_is_stored_as_exactly_the_bytes_np_save_writes(array, store):
    """One write of the array's memory instead of np.save's pieces: the same file, so the same digest."""
    saved = io.BytesIO()
    np.save(saved, array, allow_pickle=False)
    _, artifact, _ = round_trip(array, store)
    assert store.path(artifact.digest).read_bytes() == saved.getvalue()


def test_a_large_array_is_mapped_copy_on_write_and_its_file_never_changes(store):
    array = np.arange(float(MAP_BYTES // 8 + 1))
    back, artifact, _ = round_trip(array, store)
    assert type(back) is np.ndarray and back.flags.writeable and isinstance(back.base, np.memmap)
    back[:] = -1.0  # the node's own copy of the pages it changes
    np.testing.assert_array_equal(np.load(store.path(artifact.digest)), array)
    again, _, _ = round_trip(array, store)
    np.testing.assert_array_equal(again, array)


def is_mapped(array) -> bool:
    return isinstance(array.base, np.memmap)


def test_an_array_under_the_mapping_size_is_read(store):
    back, _, _ = round_trip(np.arange(float(MAP_BYTES // 8 - 100)), store)
    assert type(back) is np.ndarray and not is_mapped(back)


def test_a_large_fortran_array_comes_back_mapped_and_equal(store):
    array = np.asfortranarray(np.arange(float(MAP_BYTES // 4)).reshape(512, -1))
    back, _, _ = round_trip(array, store)
    assert is_mapped(back) and back.flags.f_contiguous
    np.testing.assert_array_equal(back, array)


def test_a_process_maps_only_so_many_arrays_and_reads_the_rest(store, monkeypatch):
    """Each mapping holds a file descriptor while it lives: past the bound, arrays are read."""
    bound = mapped.live() + 2
    monkeypatch.setattr(mapped, "most_mapped", lambda: bound)
    refs = [store_value(np.full(MAP_BYTES // 8 + 1, float(i)), codec_for(np.zeros(1)), store, "v")[1]
            for i in range(4)]
    held = [load_value(ref, store) for ref in refs]
    assert [is_mapped(a) for a in held] == [True, True, False, False]  # two mapped, then read
    assert [a[0] for a in held] == [0.0, 1.0, 2.0, 3.0]
    view = held[0][5:]
    del held[:2]
    gc.collect()
    assert mapped.live() == bound - 1  # the first mapping lives on in its view; the second is gone
    del view
    gc.collect()
    assert mapped.live() == bound - 2
    assert is_mapped(load_value(refs[3], store))  # room again


def test_an_array_is_read_where_the_filesystem_cannot_map_it(store, monkeypatch):
    before = mapped.live()
    load = np.load

    def refuse(*args, **kwargs):
        if kwargs.get("mmap_mode"):
            raise OSError(19, "No such device")  # what mmap answers on a filesystem without it
        return load(*args, **kwargs)

    monkeypatch.setattr(np, "load", refuse)
    back, _, _ = round_trip(np.arange(float(MAP_BYTES // 8 + 1)), store)
    assert not is_mapped(back) and back[-1] == MAP_BYTES // 8 and mapped.live() == before


class EvictingStore(LocalArtifactStore):
    """A store whose ``path`` names, the first ``evicted`` times, a copy another process removes before it is
    read (an object store's cache evicting it)."""

    def __init__(self, root, evicted: int) -> None:
        super().__init__(root)
        self.evicted, self.fetches = evicted, 0

    def path(self, digest):
        self.fetches += 1
        return self.root / "evicted" if self.fetches <= self.evicted else super().path(digest)


@pytest.mark.parametrize("value", [np.arange(float(MAP_BYTES // 8 + 1)), np.arange(3.0), b"bytes"],
                         ids=["mapped array", "small array", "bytes"])
def test_a_copy_evicted_before_it_was_read_is_fetched_again(value, tmp_path):
    store = EvictingStore(tmp_path / "artifacts", evicted=1)
    _, ref = store_value(value, codec_for(value), store, "v")
    back = load_value(ref, store)
    assert (back == value) if isinstance(value, bytes) else np.array_equal(back, value)
    assert store.fetches == 2


def test_a_copy_evicted_at_every_fetch_fails_naming_why(tmp_path):
    store = EvictingStore(tmp_path / "artifacts", evicted=2)
    _, ref = store_value(np.arange(3.0), codec_for(np.arange(3.0)), store, "v")
    with pytest.raises(CodecError, match="this host's copy was removed each time as soon as it was fetched"):
        load_value(ref, store)
