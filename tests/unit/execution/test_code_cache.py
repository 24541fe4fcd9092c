"""A worker's cache of unpacked code packages: fetched once, checked against their digest before a file is
written, one folder whatever the races, least recently used evicted first."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from fluksio import Settings
from fluksio.artifacts.artifact import Artifact
from fluksio.artifacts.digests import relative_path
from fluksio.artifacts.local import LocalArtifactStore
from fluksio.execution import code_cache
from fluksio.execution.code_cache import IN_USE_S, MARK_EVERY_S, USED, CodeCache
from fluksio.flows.package import PackageError, pack


def packed(tmp_path: Path, name: str, constant: int, padding: int = 0) -> tuple[str, bytes]:
    """The digest and bytes of the code package of a one-file flow (``padding`` bytes of data file with it)."""
    folder = tmp_path / "sources" / name
    folder.mkdir(parents=True)
    (folder / "flows.py").write_text(f"CONSTANT = {constant}\n")
    include = ()
    if padding:
        (folder / "data.bin").write_bytes(os.urandom(padding))
        include = ("data.bin",)
    package = pack(str(folder / "flows.py"), include)
    return package.digest, package.data


class CountingStore(LocalArtifactStore):
    """A folder store that counts the reads of each digest."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: dict[str, int] = {}

    def get(self, digest: str) -> bytes:
        self.reads[digest] = self.reads.get(digest, 0) + 1
        return super().get(digest)


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    return CountingStore(tmp_path / "artifacts")


def stored(store: LocalArtifactStore, data: bytes) -> str:
    return store.put(Artifact.from_bytes(data)).digest


def test_a_package_is_fetched_unpacked_and_then_reused_without_fetching(tmp_path: Path, store: CountingStore) -> None:
    digest, data = packed(tmp_path, "a", 1)
    assert stored(store, data) == digest
    cache = CodeCache(tmp_path / "code", 10_000_000)
    folder = cache.checkout(store, digest)
    assert (folder / "flows.py").read_text() == "CONSTANT = 1\n"
    assert folder == tmp_path / "code" / f"sha256-{digest.split(':')[1]}" / "files"
    assert cache.checkout(store, digest) == folder
    assert store.reads == {digest: 1}
    assert [p.name for p in (tmp_path / "code").iterdir()] == [folder.parent.name]  # no temporary left behind


def test_bytes_that_do_not_match_their_digest_are_refused_and_never_unpacked(tmp_path: Path,
                                                                            store: CountingStore) -> None:
    digest, data = packed(tmp_path, "a", 1)
    stored(store, data)
    _, other = packed(tmp_path, "b", 2)
    (store.root / relative_path(digest)).write_bytes(other)  # altered in the store, under the old name
    cache = CodeCache(tmp_path / "code", 10_000_000)
    with pytest.raises(PackageError, match=f"code package {digest} in the artifact store does not match its "
                                           "digest: altered or corrupted; refused, never imported"):
        cache.checkout(store, digest)
    assert not (tmp_path / "code").exists()  # nothing fetched was written


def test_a_package_missing_from_the_store_says_so(tmp_path: Path, store: CountingStore) -> None:
    digest, _ = packed(tmp_path, "a", 1)
    with pytest.raises(PackageError, match=f"code package {digest} is not in the artifact store this worker reads"):
        CodeCache(tmp_path / "code", 10_000_000).checkout(store, digest)
    with pytest.raises(PackageError, match="is not a code package's digest"):
        CodeCache(tmp_path / "code", 10_000_000).checkout(store, "sha256:../../etc")


def age(folder: Path, seconds: float) -> None:
    """Make the package in ``folder`` look last used ``seconds`` ago."""
    then = time.time() - seconds
    os.utime(folder.parent / USED, (then, then))


def test_beyond_its_size_the_least_recently_used_packages_go_but_never_one_in_use(tmp_path: Path,
                                                                                 store: CountingStore) -> None:
    packages = [packed(tmp_path, name, n, padding=40_000) for n, name in enumerate("abcd")]
    for _, data in packages:
        stored(store, data)
    cache = CodeCache(tmp_path / "code", 100_000)  # room for two
    a, b = (cache.checkout(store, digest) for digest, _ in packages[:2])
    age(a, IN_USE_S + 300)  # the oldest
    age(b, IN_USE_S + 100)
    c = cache.checkout(store, packages[2][0])
    assert not a.exists() and b.exists() and c.exists()
    age(b, 5)  # used a moment ago: a call may be importing from it, so it stays, over the limit
    d = cache.checkout(store, packages[3][0])
    assert b.exists() and c.exists() and d.exists()
    age(c, IN_USE_S + 10)
    assert cache.evict() == [c.parent]
    assert cache.checkout(store, packages[0][0]) == a and (a / "flows.py").is_file()  # fetched again


def test_a_package_checked_out_again_and_again_is_marked_used_at_most_once_a_minute(
        tmp_path: Path, store: CountingStore, monkeypatch: pytest.MonkeyPatch) -> None:
    digest, data = packed(tmp_path, "often", 1)
    stored(store, data)
    cache = CodeCache(tmp_path / "code", 10_000_000)
    folder = cache.checkout(store, digest)
    age(folder, 30)
    marked = (folder.parent / USED).stat().st_mtime
    assert cache.checkout(store, digest) == folder  # a moment later: not marked again, nothing on disk touched
    assert (folder.parent / USED).stat().st_mtime == marked
    monkeypatch.setitem(code_cache._marked, folder.parent, time.monotonic() - MARK_EVERY_S - 1)  # a minute on
    assert cache.checkout(store, digest) == folder
    assert (folder.parent / USED).stat().st_mtime > marked + 20
    assert store.reads[digest] == 1


def test_a_package_larger_than_the_whole_cache_is_still_there_for_its_call(tmp_path: Path,
                                                                          store: CountingStore) -> None:
    digest, data = packed(tmp_path, "big", 1, padding=50_000)
    stored(store, data)
    assert (CodeCache(tmp_path / "code", 1_000).checkout(store, digest) / "data.bin").is_file()


def test_two_checkouts_at_once_end_with_one_folder(tmp_path: Path, store: CountingStore) -> None:
    digest, data = packed(tmp_path, "a", 1, padding=2_000_000)
    stored(store, data)
    cache = CodeCache(tmp_path / "code", 100_000_000)
    start = threading.Barrier(4)
    found: list[Path] = []

    def checkout() -> None:
        start.wait()
        found.append(cache.checkout(store, digest))

    threads = [threading.Thread(target=checkout) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(found) == 4 and len(set(found)) == 1
    assert [p.name for p in (tmp_path / "code").iterdir()] == [found[0].parent.name]
    assert (found[0] / "flows.py").read_text() == "CONSTANT = 1\n"


def test_a_workers_cache_is_beside_its_artifacts_cache(tmp_path: Path) -> None:
    cache = CodeCache.of(Settings(artifacts_cache=tmp_path / "x" / "artifacts-cache", code_cache_mb=2))
    assert (cache.folder, cache.max_bytes) == (tmp_path / "x" / "code", 2_000_000)


def test_a_package_a_process_holds_is_never_evicted_however_long_ago_it_was_checked_out(
        tmp_path: Path, store: CountingStore) -> None:
    """A call running for hours imports lazily and reads its include= files: its package server holds them."""
    import subprocess
    import sys

    packages = [packed(tmp_path, name, n, padding=40_000) for n, name in enumerate("ab")]
    for _, data in packages:
        stored(store, data)
    cache = CodeCache(tmp_path / "code", 50_000)  # room for one
    a = cache.checkout(store, packages[0][0])
    # Another process (a package server) holds it until told to let go.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from fluksio.execution.code_cache import hold; "
         "hold(Path(sys.argv[1])); print('held', flush=True); sys.stdin.read()", str(a)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        age(a, IN_USE_S * 10)  # checked out long ago
        b = cache.checkout(store, packages[1][0])
        assert a.exists() and b.exists()  # over the limit, but held
        assert cache.evict(keep=b) == []
    finally:
        holder.communicate("")  # its end lets go (the kernel drops the lock)
    assert cache.evict(keep=b) == [a.parent] and not a.exists()
