"""References in parameters: ``@run:<id>.<output>`` and an artifact digest (``sha256:<hex>``, ``blake3:<hex>``),
resolved at submit.

A reference is replaced by what it names before the run is journaled, so the
run's row holds the value it actually used. Each failure names the parameter
and what exists instead.
"""

from __future__ import annotations

import re
from typing import Any

from fluksio.artifacts.artifact import REF_KEY, find_refs
from fluksio.artifacts.digests import DIGEST_FORM, DIGEST_PATTERN, looks_like_digest
from fluksio.artifacts.store import ArtifactStore
from fluksio.errors import OutputNotFound, RunNotFound, RunRejected, did_you_mean
from fluksio.schemas import RunStatus
from fluksio.store.db import Database
from fluksio.store.models import RunArtifact
from fluksio.store.nodes import artifact_by_digest, artifact_of_run
from fluksio.store.run_rows import get_run, node_rows

RUN_REFERENCE = re.compile(r"@run:(?P<run>[0-9A-Za-z]+)\.(?P<output>[A-Za-z_][A-Za-z0-9_]*)")


def is_reference(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith("@run:") or looks_like_digest(value))


def resolve(db: Database, artifacts: ArtifactStore, name: str, value: str) -> Any:
    """The value a reference stands for; :class:`RunRejected` saying why when it cannot be had."""
    if value.startswith("@run:"):
        return _run_output(db, artifacts, name, value)
    return _artifact(db, artifacts, name, value)


def _run_output(db: Database, artifacts: ArtifactStore, name: str, value: str) -> Any:
    match = RUN_REFERENCE.fullmatch(value)
    if match is None:
        raise RunRejected(f"parameter {name!r}: {value!r} is not a run reference; write @run:<run id>.<output>")
    try:
        run = get_run(db, match["run"])
    except RunNotFound:
        raise RunRejected(f"parameter {name!r}: there is no run {match['run']!r} (see `fluksio runs`)") from None
    try:
        found = output_of(db, run.id, match["output"])
    except OutputNotFound as exc:
        raise RunRejected(f"parameter {name!r}: {exc}") from None
    _check_bytes(artifacts, name, found)
    return found


def output_of(db: Database, run_id: str, output: str) -> Any:
    """The JSON of message ``output`` of a run (artifacts and codec values as references): from its result,
    else from its nodes' rows, else an artifact it made under that name. :class:`OutputNotFound` saying what
    the run did make when it made no such output."""
    run = get_run(db, run_id)
    made: dict[str, Any] = {}
    for row in node_rows(db, run.id):
        if row.status in ("ok", "cached") and row.outputs:
            made.update(row.outputs)
    if run.result and output in run.result:
        made[output] = run.result[output]
    if output in made:
        return made[output]
    made_artifact = artifact_of_run(db, run.id, output)
    if made_artifact is not None:
        return artifact_ref(made_artifact)
    state = "" if run.status == RunStatus.OK.value else f" (it ended {run.status})"
    listing = ", ".join(sorted(made)) or "none"
    raise OutputNotFound(f"run {run.id} made no output {output!r}{state}; the outputs it did make: {listing}"
                         f"{did_you_mean(output, made)}")


def _artifact(db: Database, artifacts: ArtifactStore, name: str, value: str) -> dict[str, Any]:
    if not DIGEST_PATTERN.fullmatch(value):
        raise RunRejected(f"parameter {name!r}: {value!r} is not an artifact digest; expected {DIGEST_FORM}")
    row = artifact_by_digest(db, value)
    if row is None:
        raise RunRejected(f"parameter {name!r}: no run produced an artifact {value}")
    return _artifact_ref(row, artifacts, name)


def artifact_ref(row: RunArtifact) -> dict[str, Any]:
    """The reference to a stored artifact row; one that holds a codec's value names the codec, so that it is
    read back as the same type."""
    ref: dict[str, Any] = {REF_KEY: {"digest": row.digest, "size": row.size, "media_type": row.media_type,
                                     "name": row.name}}
    if row.codec:
        ref[REF_KEY]["codec"] = row.codec
    return ref


def _artifact_ref(row: RunArtifact, artifacts: ArtifactStore, name: str) -> dict[str, Any]:
    ref = artifact_ref(row)
    _check_bytes(artifacts, name, ref)
    return ref


def _check_bytes(artifacts: ArtifactStore, name: str, value: Any) -> None:
    for ref in find_refs(value):
        digest = ref[REF_KEY]["digest"]
        if not artifacts.exists(digest):
            raise RunRejected(f"parameter {name!r}: the bytes of artifact {digest} are gone from the store")
