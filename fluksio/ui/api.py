"""The explorer's JSON API: what its pages show, for scripts. Every answer is JSON, errors included.

``POST`` requests (cancel, resume) need the ``_xsrf`` cookie any ``GET`` sets, echoed in an
``X-XSRFToken`` header, and no other site's ``Origin``.
"""

from __future__ import annotations

import os
from urllib.parse import quote

from fluksio.errors import InvalidRequest
from fluksio.ui import queries
from fluksio.ui.base import ExplorerHandler
from fluksio.ui.downsample import DEFAULT_POINTS, MIN_POINTS

#: The most points per series a request may ask for.
POINTS_MAX = 100_000
#: Bytes per write of an artifact download.
CHUNK_BYTES = 256 * 1024


class RunsApi(ExplorerHandler):
    """``GET /api/runs?flow=&status=&group=&parent=&limit=&offset=``: a page of runs, newest first."""

    async def get(self) -> None:
        filters = run_filters(self)
        page = await self.explorer.call(queries.list_runs, self.explorer.client, filters)
        self.write_json(page.to_json())


def run_filters(handler: ExplorerHandler) -> queries.RunFilters:
    return queries.RunFilters(
        flow=handler.arg("flow"), status=handler.arg("status"), group=handler.arg("group"),
        parent=handler.arg("parent"),
        limit=handler.int_arg("limit", queries.PAGE_SIZE, 1, queries.PAGE_MAX) or queries.PAGE_SIZE,
        offset=handler.int_arg("offset", 0, 0) or 0,
    )


class RunApi(ExplorerHandler):
    """``GET /api/runs/<id>``: the run as ``fluksio show --json`` prints it, plus its artifacts, its child
    runs and (while it runs) the calls running and waiting."""

    async def get(self, run_id: str) -> None:
        detail = await self.explorer.call(queries.run_detail, self.explorer.client, run_id)
        self.write_json(detail.to_json())


class MetricsApi(ExplorerHandler):
    """``GET /api/runs/<id>/metrics?points=N[&name=][&start=][&end=]``: each series, at most N points."""

    async def get(self, run_id: str) -> None:
        points = self.int_arg("points", DEFAULT_POINTS, MIN_POINTS, POINTS_MAX) or DEFAULT_POINTS
        start, end = self.int_arg("start", None, 0), self.int_arg("end", None, 0)
        if start is not None and end is not None and end < start:
            raise InvalidRequest(f"end ({end}) must not be before start ({start})")
        body = await self.explorer.call(queries.metrics, self.explorer.client, run_id, points, self.arg("name"),
                                        start, end)
        self.write_json(body)


class RunActionApi(ExplorerHandler):
    """``POST /api/runs/<id>/cancel`` and ``POST /api/runs/<id>/resume``."""

    async def post(self, run_id: str, action: str) -> None:
        act = queries.cancel_run if action == "cancel" else queries.resume_run
        self.write_json(await self.explorer.call(act, self.explorer.client, run_id))


class MachinesApi(ExplorerHandler):
    """``GET /api/machines``: ``client.placement()`` — machines, their grants, what waits and why, provisioners."""

    async def get(self) -> None:
        self.write_json(await self.explorer.call(queries.machines, self.explorer.client))


class ArtifactApi(ExplorerHandler):
    """``GET /api/artifacts/<digest>``: the bytes, streamed, of an artifact a run made; never a path."""

    async def get(self, digest: str) -> None:
        row, handle = await self.explorer.call(queries.artifact_file, self.explorer.client, digest)
        with handle:
            name = row.name or digest.split(":", 1)[1][:16]
            # Always a download: the bytes are whatever a node wrote, never to run as a page of this site.
            self.set_header("Content-Type", row.media_type or "application/octet-stream")
            self.set_header("Content-Disposition", f"attachment; filename*=UTF-8''{quote(name, safe='')}")
            self.set_header("Content-Security-Policy", "default-src 'none'; sandbox")
            self.set_header("Content-Length", str(os.fstat(handle.fileno()).st_size))
            self.set_header("Cache-Control", "private, max-age=86400, immutable")  # content-addressed
            while chunk := await self.explorer.call(handle.read, CHUNK_BYTES):
                self.write(chunk)
                await self.flush()
        self.finish()
