"""The codecs fluksio brings: numpy arrays as ``.npy``, pandas frames and series as Parquet, and bytes.

None of them imports numpy, pandas or pyarrow before a value needs it: a process
that never makes an array never loads numpy. Every one writes and reads without
pickle: ``.npy`` with ``allow_pickle=False`` (an object array is refused rather
than pickled), Parquet through pyarrow (a column of Python objects Arrow has no
type for is refused, naming the column).
"""

from __future__ import annotations

import json
import warnings
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from fluksio.codecs.mapped import map_array
from fluksio.codecs.registry import Codec
from fluksio.errors import CodecError

#: What ``pip install`` brings numpy, pandas and pyarrow.
DATA_EXTRA = "fluksio[data]"
#: The column a Series is stored as, and the schema metadata key that keeps its name (as JSON).
SERIES_COLUMN, SERIES_NAME_KEY = "values", b"fluksio.series_name"


def need(module: str, what: str, extra: str = DATA_EXTRA) -> ModuleType:
    """``import module``, or :class:`CodecError` saying which extra brings it."""
    try:
        return import_module(module)
    except ImportError:
        raise CodecError(f"{what} needs the package {module.split('.')[0]!r}, which is not installed here: "
                         f"pip install '{extra}'") from None


# -- numpy -------------------------------------------------------------------------------------------

#: An array file at least this large is mapped into the node's memory instead of read: its pages come
#: from the page cache as the node touches them, with no copy of the whole and no allocation up front
#: (200 MiB: 1 ms to map, against 56–250 ms for ``np.load`` to read). Artifact files are never changed once
#: written, nor replaced (see artifacts/local.py); a cache eviction unlinks a file, which leaves a mapping
#: whole. How many a process maps at once is bounded (codecs/mapped.py).
MAP_BYTES = 1 << 20


def write_npy(value: Any, file: BinaryIO) -> None:
    np = need("numpy", "a numpy array (.npy)")
    if type(value) not in (np.ndarray, np.memmap):
        # A masked array or a matrix would come back as a plain array, its mask or shape rules lost.
        raise CodecError(f"is a {type(value).__module__}.{type(value).__qualname__}; the numpy codec carries "
                         "plain arrays only: return np.asarray(value) (and a mask as an array of its own), or "
                         "register a codec for this type")
    if value.dtype.hasobject:
        raise CodecError(f"is a numpy array of dtype {value.dtype} (Python objects, shape {value.shape}), which "
                         "cannot be stored without pickle; convert it to a numeric, string or datetime dtype "
                         "(e.g. value.astype(str)), or return a list")
    if value.dtype.names is not None or not (value.flags.c_contiguous or value.flags.f_contiguous) or \
            not _described_exactly(np, value.dtype):
        np.save(file, value, allow_pickle=False)  # numpy picks the header's version and copies piece by piece
        return
    # What np.save writes, but the data in one piece: np.save copies a file object's data out in 16 MiB
    # pieces, each hashed only after it is copied; one write of the array's own memory is digested on a
    # thread while it is written (artifacts/hashing.py), with no copy at all.
    np.lib.format.write_array_header_1_0(file, np.lib.format.header_data_from_array_1_0(value))
    in_memory_order = value if value.flags.c_contiguous else value.T
    file.write(memoryview(in_memory_order.reshape(-1).view(np.uint8)))


def _described_exactly(np: ModuleType, dtype: Any) -> bool:
    """Whether a ``.npy`` header names ``dtype`` so that reading it makes the same dtype (a dtype numpy's
    format cannot describe, a third party's, is left to ``np.save`` to refuse)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # np.save says so itself when it gets the dtype
        try:
            return bool(np.lib.format.descr_to_dtype(np.lib.format.dtype_to_descr(dtype)) == dtype)
        except (TypeError, ValueError):
            return False


def read_npy(path: Path) -> Any:
    """The array in the file at ``path``; a large one mapped rather than read (see :data:`MAP_BYTES`)."""
    np = need("numpy", "reading a numpy array (.npy)")
    if path.stat().st_size >= MAP_BYTES:
        mapped = map_array(np, path)
        if mapped is not None:
            return mapped
    return np.load(path, allow_pickle=False)


# -- pandas ------------------------------------------------------------------------------------------


def _parquet_failure(kind: str, exc: Exception) -> CodecError:
    reason = "; ".join(str(part) for part in exc.args) or type(exc).__name__
    return CodecError(f"is a pandas {kind} that Parquet cannot hold: {reason}. Convert that column to a type "
                      "Arrow knows (numbers, strings, datetimes, lists, dicts), e.g. with .astype(str), or return "
                      "the value some other way")


def _check_exact(value: Any, kind: str) -> None:
    if type(value) is not getattr(need("pandas", f"a pandas {kind}"), kind):
        # A subclass (a GeoDataFrame …) would come back as a plain pandas object, its own behaviour lost.
        raise CodecError(f"is a {type(value).__module__}.{type(value).__qualname__}, a subclass of pandas "
                         f"{kind}; it would come back as a plain {kind}: register a codec for it, or return "
                         f"pandas.{kind}(value)")


def write_frame(value: Any, file: BinaryIO) -> None:
    _check_exact(value, "DataFrame")
    need("pyarrow", "a pandas DataFrame (Parquet)")
    try:
        value.to_parquet(file, engine="pyarrow")
    except (ValueError, TypeError, NotImplementedError) as exc:  # pyarrow's errors are ValueError/TypeError
        raise _parquet_failure("DataFrame", exc) from None


def read_frame(path: Path) -> Any:
    pd = need("pandas", "reading a pandas DataFrame (Parquet)")
    need("pyarrow", "reading a pandas DataFrame (Parquet)")
    return pd.read_parquet(path, engine="pyarrow")


def write_series(value: Any, file: BinaryIO) -> None:
    _check_exact(value, "Series")
    pa = need("pyarrow", "a pandas Series (Parquet)")
    parquet = need("pyarrow.parquet", "a pandas Series (Parquet)")
    try:
        name = json.dumps(value.name)
    except (TypeError, ValueError):
        raise CodecError(f"is a pandas Series named {value.name!r}; only a name JSON can carry (a string, a "
                         "number, None) is kept: rename it") from None
    try:
        table = pa.Table.from_pandas(value.to_frame(name=SERIES_COLUMN))
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise _parquet_failure("Series", exc) from None
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), SERIES_NAME_KEY: name.encode()})
    parquet.write_table(table, file)


def read_series(path: Path) -> Any:
    pd = need("pandas", "reading a pandas Series (Parquet)")
    parquet = need("pyarrow.parquet", "reading a pandas Series (Parquet)")
    metadata = parquet.read_schema(path).metadata or {}
    series = pd.read_parquet(path, engine="pyarrow")[SERIES_COLUMN]
    series.name = json.loads(metadata.get(SERIES_NAME_KEY, b"null"))
    return series


# -- bytes -------------------------------------------------------------------------------------------


def write_bytes(value: bytes, file: BinaryIO) -> None:
    file.write(value)


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


BUILTIN_CODECS = (
    Codec("numpy", "numpy:ndarray", write_npy, read_npy, media_type="application/x-npy", suffix=".npy",
          extra=DATA_EXTRA),
    Codec("pandas", "pandas:DataFrame", write_frame, read_frame, media_type="application/vnd.apache.parquet",
          suffix=".parquet", extra=DATA_EXTRA),
    Codec("pandas.series", "pandas:Series", write_series, read_series,
          media_type="application/vnd.apache.parquet", suffix=".parquet", extra=DATA_EXTRA),
    Codec("bytes", bytes, write_bytes, read_bytes, suffix=".bin"),
)
