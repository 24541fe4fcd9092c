"""Artifact stores: upload and download throughput and peak memory for one large artifact.

    .venv/bin/python benchmarks/artifacts_store.py [--size-mb 1024] [--repeat 3]   (--smoke: 32 MB, once)

Compares the object store (``s3://…`` on moto's standalone S3-compatible server, started on a free
127.0.0.1 port) with the folder store (the baseline: a local folder). Each measurement runs in a fresh
process that stores a file of ``--size-mb`` MB (sparse, so making it costs no disk; the stores write real
bytes) with ``Artifact.from_path`` + ``put`` (digest, then upload or copy), then, as a second host with an
empty cache would, gets a local copy with ``path()`` and reads it to the end. Peak memory is the rise of
the kernel's high-water mark (``VmHWM``, reset before each step) above the resident set before it.

Throughput on moto measures moto as much as fluksio: a real bucket's figures differ. The ratio of peak
memory is the point: the object store's stays flat (the issue's bound: ≤ 64 MB for a 2 GB file).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

BUCKET = "fluksio-bench"
#: The bound on an object-store step's peak memory, in MB.
TARGET_GROWTH_MB = 64.0
MB = 1 << 20
#: What moto's server and the stores are given (moto takes any credentials).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


# -- the child: one store, one artifact ----------------------------------------------------------------


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        found = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0


def _measured(step: Callable[[], Any]) -> tuple[Any, float, float]:
    """``step()``'s result, its peak rise of the resident set in MB, and its seconds."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the high-water mark starts again from the resident set now
    before = _status("VmRSS")
    started = time.monotonic()
    result = step()
    return result, (_status("VmHWM") - before) / MB, time.monotonic() - started


def child(size_mb: int, workdir: Path, out: Path) -> None:
    from fluksio.artifacts import Artifact, open_store
    from fluksio.settings import load_settings

    source = workdir / "checkpoint.bin"
    with source.open("wb") as handle:
        handle.write(b"head" * 1024)
        handle.truncate(size_mb * MB)
    settings = load_settings()
    store = open_store(settings, check=True)
    store.put(Artifact.from_bytes(b"warm up " + workdir.name.encode()))
    stored, up_mb, up_s = _measured(lambda: store.put(Artifact.from_path(source)))
    reader = open_store(settings.model_copy(update={"artifacts_cache": workdir / "reader-cache"}))
    reader.exists(stored.digest)  # the reader's connection is warm too

    def read_all() -> int:
        with reader.path(stored.digest).open("rb") as handle:
            return sum(len(chunk) for chunk in iter(lambda: handle.read(8 * MB), b""))

    count, down_mb, down_s = _measured(read_all)
    assert count == size_mb * MB, count
    out.write_text(json.dumps({"upload_mb_s": size_mb / up_s, "download_mb_s": size_mb / down_s,
                               "upload_growth_mb": up_mb, "download_growth_mb": down_mb}))


# -- the parent: servers, repeats, figures -------------------------------------------------------------


def start_moto(workdir: Path, processes: harness.Processes) -> str:
    import urllib.error
    import urllib.request

    port = harness.free_port()
    endpoint = f"http://127.0.0.1:{port}"
    processes.start("moto", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                    env=harness.child_env(**CREDENTIALS))

    def answers() -> bool:
        processes.check_alive("moto")
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
        except urllib.error.HTTPError:
            pass
        except OSError:
            return False
        return True

    harness.wait_until(answers, 60, "moto's server answering")
    import boto3

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                 region_name="us-east-1").create_bucket(Bucket=BUCKET)
    return endpoint


def one_run(kind: str, size_mb: int, workdir: Path, endpoint: str, index: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix=f"{kind}-{index}-", dir=workdir))
    store = str(folder / "artifacts") if kind == "folder" else f"s3://{BUCKET}/run-{index}"
    try:
        return harness.child_result(__file__, ["--child", "--size-mb", str(size_mb), "--workdir", str(folder)],
                                    timeout_s=1800, FLUKSIO_ARTIFACTS_DIR=store,
                                    FLUKSIO_ARTIFACTS_ENDPOINT_URL=endpoint, **CREDENTIALS)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(size_mb: int, repeat: int, budget_s: float) -> list[Figure]:
    deadline = time.monotonic() + budget_s
    samples: dict[str, list[dict[str, float]]] = {"object": [], "folder": []}
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-artifacts-") as tmp:
        workdir = Path(tmp)
        processes = harness.Processes(workdir)
        try:
            endpoint = start_moto(workdir, processes)
            for index in range(repeat):
                if index and time.monotonic() > deadline:
                    break
                for kind in samples:  # interleaved, so a busy moment of the machine hits both
                    harness.progress(f"{kind} store, {size_mb} MB, run {index + 1}")
                    samples[kind].append(one_run(kind, size_mb, workdir, endpoint, index))
        finally:
            processes.stop_all()
    section = f"artifacts ({size_mb:,} MB, S3 on moto vs a folder)"

    def figure(metric: str, key: str, unit: str, higher: bool, target: float | None = None) -> Figure:
        ours = [s[key] for s in samples["object"]]
        base = [s[key] for s in samples["folder"]]
        return Figure(section, metric, unit, harness.median(ours), harness.median(base), "folder store",
                      higher_is_better=higher, target=target, samples=ours, baseline_samples=base)

    growth = [figure("upload peak memory", "upload_growth_mb", "MB", False),
              figure("download peak memory", "download_growth_mb", "MB", False)]
    bound = Figure(section, "worst step's peak memory (object store)", "MB",
                   max(max(s["upload_growth_mb"], s["download_growth_mb"]) for s in samples["object"]),
                   target=TARGET_GROWTH_MB)
    return [figure("upload (from_path + put)", "upload_mb_s", "MB/s", True),
            figure("download (path + read)", "download_mb_s", "MB/s", True), *growth, bound]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="the artifact's size (default 1024)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    harness.add_common_arguments(parser)
    args = parser.parse_args()
    if args.child:
        child(args.size_mb, Path(args.workdir), Path(args.child_out))
        return
    harness.isolate()
    if args.smoke:
        args.size_mb, args.repeat = 32, 1
    harness.emit_figures(measure(args.size_mb, args.repeat, args.budget_s), args.json)


if __name__ == "__main__":
    main()
