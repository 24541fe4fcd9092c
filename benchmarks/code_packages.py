"""Code packages: packing a project, digesting it unchanged, and storing it in a folder artifact store.

    .venv/bin/python benchmarks/code_packages.py [--modules 50] [--module-kb 20] [--repeat 5]

The project is a flow file that imports ``--modules`` modules of ``--module-kb`` KB each (functions with
docstrings, as real modules are), 1 MB in all by default, in a fresh temporary folder; the files are left
to settle (flows/imports.py trusts a file's stat state only once it is ``SETTLE_NS`` old) before timing.

* pack: ``pack()`` with the memos emptied first, as the first ``Flow(...)`` of a process pays it: every
  module read and parsed for its imports, the archive made and digested;
* package_digest, unchanged: what every later ``Flow(...)`` and submit pays (a stat per file);
* storing into a folder store (``LocalArtifactStore``), as a submit does: the digest, ``exists`` and, the
  first time, ``put``; unchanged, ``exists`` finds it and nothing is written.

Figures are medians of ``--repeat`` runs; targets are reported, never asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Figure  # noqa: E402

#: The issue's bounds, in ms: packing a 1 MB project, and digesting it again unchanged.
PACK_TARGET_MS = 100.0
DIGEST_TARGET_MS = 10.0
#: Calls of package_digest timed together per sample: one takes well under a millisecond.
DIGESTS_PER_SAMPLE = 20


def make_project(root: Path, modules: int, module_kb: int) -> Path:
    """A flow file importing ``modules`` modules of about ``module_kb`` KB each; returns the flow file."""
    for index in range(modules):
        lines = [f'"""Module {index} of the benchmark project."""\n', "import os\n"]
        size, function = sum(map(len, lines)), 0
        while size < module_kb * 1000:
            line = (f"\n\ndef function_{function}(value):\n"
                    f'    """Padding, so that the module weighs what a real one does ({function})."""\n'
                    f"    return os.path.join(str(value), '{function}')\n")
            lines.append(line)
            size += len(line)
            function += 1
        (root / f"module_{index:03d}.py").write_text("".join(lines))
    flow = root / "flows.py"
    flow.write_text("".join(f"import module_{index:03d}\n" for index in range(modules)))
    return flow


def milliseconds(step: Callable[[], object], times: int = 1) -> float:
    started = time.perf_counter()
    for _ in range(times):
        step()
    return (time.perf_counter() - started) * 1000 / times


def measure(modules: int, module_kb: int, repeat: int, budget_s: float) -> list[Figure]:
    from fluksio.artifacts import Artifact
    from fluksio.artifacts.local import LocalArtifactStore
    from fluksio.flows import imports, package

    deadline = time.monotonic() + budget_s
    packs, digests, first_stores, again_stores = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="fluksio-bench-") as workdir:
        flow = str(make_project(Path(workdir), modules, module_kb))
        time.sleep(imports.SETTLE_NS / 1e9 + 0.05)
        size_kb = len(package.pack(flow).data) / 1000
        harness.progress(f"{modules} modules, {size_kb:,.0f} KB packed; {repeat} repeat(s)")

        def cold_pack() -> float:
            # What a fresh process starts with: nothing remembered of the files.
            imports._imports_memo.clear()
            package._digest_memo.clear()
            return milliseconds(lambda: package.pack(flow))

        def store_first(index: int) -> float:
            store = LocalArtifactStore(Path(workdir) / f"artifacts-{index}")

            def submit() -> None:
                digest = package.package_digest(flow)
                if not store.exists(digest):
                    store.put(Artifact.from_bytes(package.pack(flow).data, name="code.zip"))

            elapsed = milliseconds(submit)
            again_stores.append(milliseconds(submit, DIGESTS_PER_SAMPLE))
            return elapsed

        for index in range(repeat):
            if time.monotonic() > deadline:
                break
            packs.append(cold_pack())
            package.package_digest(flow)  # remembered again after the cold pack emptied the memo
            digests.append(milliseconds(lambda: package.package_digest(flow), DIGESTS_PER_SAMPLE))
            first_stores.append(store_first(index))
    section = "code packages"
    shape = f"{modules} modules of {module_kb} KB"
    return [
        Figure(section, f"pack, first time in a process ({shape})", "ms", harness.median(packs),
               target=PACK_TARGET_MS, samples=packs,
               note=f"archive {size_kb:,.0f} KB; every module read and scanned for its imports"),
        Figure(section, f"package_digest, unchanged ({shape})", "ms", harness.median(digests),
               target=DIGEST_TARGET_MS, samples=digests, note="a stat per file; nothing read"),
        Figure(section, "store in a folder store, first time", "ms", harness.median(first_stores),
               samples=first_stores, note="digest, exists, pack, put"),
        Figure(section, "store in a folder store, unchanged", "ms", harness.median(again_stores),
               samples=again_stores, note="digest, exists: nothing written"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", type=int, default=50, help="modules the flow file imports (default 50)")
    parser.add_argument("--module-kb", type=int, default=20, help="size of each module, in KB (default 20)")
    harness.add_common_arguments(parser, repeat=5)
    args = parser.parse_args()
    harness.isolate()
    if args.smoke:
        args.modules, args.module_kb, args.repeat = 5, 2, 1
    harness.emit_figures(measure(args.modules, args.module_kb, args.repeat, args.budget_s), args.json)


if __name__ == "__main__":
    main()
