"""The code a run runs, decided at submit: a package shipped with it, or the code the workers registered.

A flow defined in a file is packed (flows/package.py) into a deterministic archive whose digest is the
flow's code digest; the archive goes into the artifact store once, and so does the graph described as data
(flows/manifest.py), which a driver that never imports the code walks. The run records the digest, what a
worker imports from the package, the submitter's signature over the digest (when it signs) and the graph's
digest: any worker that trusts the package runs the run's calls from it, without a restart.

Not shipped: a flow defined without a file (a notebook cell; its digest is that of its functions), and a
flow whose files changed since this process loaded it (the package would not be the code this process walks
and validated against). Such a run records the code this process loaded, and runs only where that code is
registered.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import weakref
from dataclasses import dataclass

from fluksio.artifacts.artifact import Artifact
from fluksio.artifacts.store import ArtifactStore
from fluksio.codecs import REGISTRY
from fluksio.errors import ArtifactError, FluksioError, MessageRefused, RunRejected, first_line
from fluksio.flows.flow import Flow
from fluksio.flows.manifest import class_name, manifest_bytes, rebuild
from fluksio.flows.package import CodePackage, largest, pack, package_digest
from fluksio.flows.source import loaded_digest, short
from fluksio.schemas import RunRecord
from fluksio.security.signatures import Signer
from fluksio.store.db import Database
from fluksio.store.run_rows import find_shipped

log = logging.getLogger(__name__)

#: The module a flow rebuilt from its description says it comes from (``Flow.described``).
DESCRIBED = "fluksio.flows.manifest"
#: A code package's digest, as runs record it.
PACKAGE_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
#: Megabytes, for the size limit's message.
MB = 1024 * 1024


@dataclass(frozen=True)
class RunCode:
    """What a run records of its code (the ``code_*`` and ``graph_digest`` columns of ``runs``)."""

    digest: str | None
    #: What a worker imports from the package; ``None``: not shipped.
    entry: str | None = None
    signature: str | None = None
    #: The artifact holding the graph as data (``None``: not shipped).
    graph: str | None = None


#: Per flow object: (its node count, the digest of its stored description). A flow's description changes
#: only when a node is added, so it is made and stored once, not at every submit.
_graphs: weakref.WeakKeyDictionary[Flow, tuple[int, str]] = weakref.WeakKeyDictionary()
_graphs_lock = threading.Lock()


def ship(flow: Flow, artifacts: ArtifactStore, *, max_mb: float, signer: Signer | None) -> RunCode:
    """The code of a run of ``flow``: its package stored (once) and described, or just its loaded digest."""
    loaded = loaded_digest(flow)
    if flow.source_file is None or flow.module == DESCRIBED:
        return RunCode(loaded)
    try:
        # Costs a stat per file while the files are unchanged (flows/package.py keeps their digest).
        now = package_digest(flow.source_file, flow.include)
    except (OSError, FluksioError) as exc:
        log.warning("flow %r: its code cannot be packed (%s); its runs run only where it is registered",
                    flow.name, exc)
        return RunCode(loaded)
    if now != loaded:
        log.warning("flow %r: its files changed since this process loaded it (loaded %s, on disk %s); its runs "
                    "run the loaded code, only where it is registered. Load it again to ship the new code",
                    flow.name, short(loaded), short(now))
        return RunCode(loaded)
    try:
        entry = _stored(flow, now, artifacts, max_mb)
        graph = describe_once(flow, artifacts)
    except ArtifactError as exc:
        # The run can still run wherever its flow is registered, as before code travelled: not a reason to
        # refuse it. Said, since a worker that does not hold the code will refuse it.
        log.warning("flow %r: its code package could not be stored (%s); this run runs only where the flow is "
                    "registered", flow.name, first_line(str(exc)))
        return RunCode(now)
    signature = signer.sign_code(now, entry) if signer is not None else None
    return RunCode(now, entry, signature, graph)


def _stored(flow: Flow, digest: str, artifacts: ArtifactStore, max_mb: float) -> str:
    """Store the flow's code package under ``digest`` unless the store holds it; what a worker imports from it."""
    if artifacts.exists(digest):
        return _entry(flow, max_mb)
    package = _checked_pack(flow, max_mb)
    stored = artifacts.put(Artifact.from_bytes(package.data, name=f"{flow.name}-code.zip",
                                               media_type="application/zip"))
    if stored.digest != digest:  # the package's digest is the artifact's: a store digesting otherwise cannot hold it
        raise RunRejected(f"the artifact store keeps flow {flow.name!r}'s code package as {stored.digest}, not "
                          f"under its digest {digest}; code packages need sha256 artifact digests")
    return package.entry


def _checked_pack(flow: Flow, max_mb: float) -> CodePackage:
    assert flow.source_file is not None
    package = pack(flow.source_file, flow.include, flow.module)
    if len(package.data) > max_mb * MB:
        raise RunRejected(
            f"the code package of flow {flow.name!r} is {len(package.data) / MB:.1f} MB, over the "
            f"{max_mb:g} MB limit (FLUKSIO_CODE_MAX_MB); its largest files: {largest(package.files)}. Keep "
            "data out of the flow's imports and include= globs (read it from the artifact store), or raise "
            "the limit")
    return package


#: The entry of a stored package, per (flow file, module, package digest): what pack said, without packing.
_entries: dict[tuple[str, str, str], str] = {}


def _entry(flow: Flow, max_mb: float) -> str:
    assert flow.source_file is not None and flow.source_digest is not None
    key = (flow.source_file, flow.module, flow.source_digest)
    entry = _entries.get(key)
    if entry is None:
        entry = _entries[key] = _checked_pack(flow, max_mb).entry
    return entry


def earlier(db: Database, artifacts: ArtifactStore, flow: str, digest: str,
            signer: Signer | None) -> tuple[RunCode, Flow]:
    """An earlier package of flow ``flow`` to run again unchanged (``submit(..., code=digest)``), and its graph.

    What to import from it, its graph and its signature are those of an earlier run that shipped it; the package
    must still be in the artifact store. It is never signed afresh: that would vouch for whatever the run store
    says was shipped. A signed one is checked against this process's certificates.
    """
    if not isinstance(digest, str) or not PACKAGE_DIGEST.match(digest):
        raise RunRejected(f"code={digest!r} is not a code package digest; give one as `fluksio show RUN` prints it "
                          "(sha256: and 64 hex digits)")
    shipped = find_shipped(db, flow, digest)
    if shipped is None:
        raise RunRejected(f"no run of flow {flow!r} shipped code package {digest}; `fluksio show RUN` prints the "
                          "package of a run (its 'code' line), and `fluksio runs --flow NAME` lists the runs")
    entry, graph, signature = shipped
    if not artifacts.exists(digest):
        raise RunRejected(f"code package {digest} of flow {flow!r} is no longer in the artifact store")
    try:
        rebuilt = rebuild(json.loads(artifacts.get(graph)), code_digest=digest, known_types=known_types())
    except (FluksioError, ValueError) as exc:
        raise RunRejected(f"the graph of code package {short(digest)} (artifact {graph}) cannot be read: "
                          f"{first_line(str(exc))}") from None
    if signature is not None and signer is not None:
        try:
            signer.verify_code(digest, entry, signature)
        except MessageRefused as exc:
            raise RunRejected(f"code package {short(digest)} of flow {flow!r} was {exc}; it is not run again "
                              "under this installation's trust") from None
    return RunCode(digest, entry, signature, graph), rebuilt


def known_types() -> dict[str, type]:
    """The input types a graph rebuilt from its description gets back as themselves (flows/manifest.py): an
    Artifact, and the types of the codecs this process has resolved (an input of another type accepts any
    value, as the submitter checked it)."""
    types: dict[str, type] = {class_name(Artifact): Artifact}
    for name in REGISTRY.names():
        codec_type = REGISTRY.named(name).type
        if isinstance(codec_type, type):
            types[class_name(codec_type)] = codec_type
    return types


def package_of(artifacts: ArtifactStore, record: RunRecord) -> bytes:
    """The code package the run ``record`` ran (:class:`RunRejected` when it did not travel with the run)."""
    if record.code_entry is None or record.code_digest is None:
        raise RunRejected(f"run {record.id}'s code did not travel with it (its flow has no file, or its files "
                          "changed after the submitter loaded them): the workers ran the flow they registered as "
                          f"{short(record.code_digest)}")
    return artifacts.get(record.code_digest)


def describe_once(flow: Flow, artifacts: ArtifactStore) -> str:
    """The digest of ``flow``'s description in the artifact store, stored there the first time."""
    with _graphs_lock:
        known = _graphs.get(flow)
    if known is not None and known[0] == len(flow.nodes) and artifacts.exists(known[1]):
        return known[1]
    stored = artifacts.put(Artifact.from_bytes(manifest_bytes(flow), name=f"{flow.name}-graph.json",
                                               media_type="application/json"))
    with _graphs_lock:
        _graphs[flow] = (len(flow.nodes), stored.digest)
    return stored.digest
