"""A binary file that digests what is written through it: bytes are hashed once, on their way to disk."""

from __future__ import annotations

import io
import threading
from typing import BinaryIO

from fluksio.artifacts.digests import ALGORITHMS, VALUE_ALGORITHM

#: A piece at least this large is hashed on a helper thread while it is written: both release the GIL,
#: so a large value costs about the longer of the two rather than their sum, in bytes.
OVERLAP_BYTES = 1 << 20


class HashingWriter(io.RawIOBase):
    """Writes to ``target`` and keeps the digest and the count of every byte written (``digest``, ``size``),
    the digest of ``algorithm`` (BLAKE3 unless said: what names a codec's value).

    What a codec writes a value into: the value is encoded once, straight into the file that becomes the
    artifact, and never held whole in memory as bytes.
    """

    def __init__(self, target: BinaryIO, algorithm: str = VALUE_ALGORITHM) -> None:
        super().__init__()
        self._target = target
        self._algorithm = algorithm
        self._hasher = ALGORITHMS[algorithm]()
        #: Bytes written so far.
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        if len(view) >= OVERLAP_BYTES:
            hashing = threading.Thread(target=self._hasher.update, args=(view,), name="fluksio-hash", daemon=True)
            hashing.start()
            try:
                self._target.write(view)
            finally:
                hashing.join()  # before the caller may reuse the buffer, and before the next piece
        else:
            self._hasher.update(view)
            self._target.write(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._target.flush()

    @property
    def digest(self) -> str:
        """``<algorithm>:<hex>`` of the bytes written so far."""
        return f"{self._algorithm}:{self._hasher.hexdigest()}"
