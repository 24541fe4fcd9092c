"""The stored bytes behind a run's output, found by the output's name rather than by their digest.

``fluksio artifact get RUN OUTPUT -o FILE`` writes the file a node returned (an ``Artifact``, or a codec's
value such as a frame's Parquet) without the user first copying its digest out of ``fluksio show``. A
mapped node's output is a list, one value per element: ``OUTPUT[I]`` names element ``I``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fluksio.artifacts.artifact import REF_KEY, is_ref
from fluksio.errors import ArtifactError, OutputNotFound
from fluksio.runs.references import output_of
from fluksio.store.db import Database
from fluksio.store.run_rows import get_run

#: ``NAME`` or ``NAME[I]``: an output of a run, or element ``I`` of a list-valued one (a mapped node's).
OUTPUT_ELEMENT = re.compile(r"(?P<output>[A-Za-z_][A-Za-z0-9_]*)(?:\[(?P<index>[0-9]+)\])?")
#: Characters of a JSON output quoted when it is refused for not being a file.
QUOTED = 60


def output_artifact(db: Database, run_id: str, output: str) -> dict[str, Any]:
    """The artifact that holds output ``output`` of a run (``NAME``, or ``NAME[I]`` for element ``I`` of a
    list-valued output): its reference's body, ``digest``, ``size``, ``media_type``, ``name`` (and ``codec`` for
    a codec's value).

    :class:`OutputNotFound` when the run made no such output (naming those it made) or element;
    :class:`ArtifactError` when the output is a JSON value, not bytes, or a list of files (saying how to name one).
    """
    match = OUTPUT_ELEMENT.fullmatch(output)
    if match is None:
        raise OutputNotFound(f"{output!r} is not an output's name; write NAME, or NAME[I] for element I of a mapped "
                             "node's output")
    run = get_run(db, run_id)
    name = match["output"]
    value = output_of(db, run.id, name)
    where = f"output {name!r} of run {run.id}"
    if match["index"] is not None:
        index = int(match["index"])
        if not isinstance(value, list):
            raise OutputNotFound(f"{where} is not a list (a mapped node's), so it has no element [{index}]; "
                                 f"write {name}")
        if index >= len(value):
            raise OutputNotFound(f"{where} has {len(value)} element(s), [0] to [{len(value) - 1}]; there is no "
                                 f"[{index}]")
        value, where = value[index], f"element {index} of {where}"
    if is_ref(value):
        body: dict[str, Any] = value[REF_KEY]
        return body
    if isinstance(value, list) and value and all(is_ref(item) for item in value):
        raise ArtifactError(f"{where} is a list of {len(value)} files (one per element of a mapped node); name "
                            f"one: {name}[0] to {name}[{len(value) - 1}]")
    text = json.dumps(value, default=str, ensure_ascii=False)
    shown = text if len(text) <= QUOTED else text[: QUOTED - 1] + "…"
    raise ArtifactError(f"{where} is a JSON value, not a file ({shown}); `fluksio show {run.id}` prints it, and "
                        f"client.output({run.id!r}, {name!r}) returns it")
