"""The request handler every page and API endpoint of the explorer derives from: who may ask, what a
state-changing request must carry, and how an error is answered (JSON, never a traceback)."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tornado import template
from tornado.web import HTTPError, RequestHandler, StaticFileHandler

from fluksio.errors import (
    ArtifactError,
    BrokerUnavailable,
    FluksioError,
    InvalidRequest,
    RunNotFound,
    RunRejected,
    StoreUnavailable,
)
from fluksio.ui.context import Explorer

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).with_name("templates")
STATIC = Path(__file__).with_name("static")
#: The largest whole number a query argument may be: what the run store's integers hold (SQLite, PostgreSQL
#: BIGINT), so a huge offset is a 400 that says so, not an overflow deep in the driver.
INT_MAX = 2**63 - 1
#: HTTP status of each kind of error fluksio raises on purpose (the first that matches).
STATUS_OF: tuple[tuple[type[FluksioError], int], ...] = (
    (RunNotFound, 404), (InvalidRequest, 400), (RunRejected, 409), (ArtifactError, 404),
    (StoreUnavailable, 503), (BrokerUnavailable, 503), (FluksioError, 400),
)
#: Pages load only what the explorer serves itself: no inline script, no other origin.
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


class ExplorerHandler(RequestHandler):
    """Basic auth on every request, same origin and a CSRF token on every state change, JSON errors."""

    explorer: Explorer

    def initialize(self, explorer: Explorer) -> None:
        self.explorer = explorer
        self._started = time.perf_counter()

    # -- who may ask --------------------------------------------------------------------------------

    async def prepare(self) -> None:
        self._check_credentials()
        method = (self.request.method or "GET").lower()
        if getattr(type(self), method, None) is getattr(RequestHandler, method, None):
            raise HTTPError(405, f"{self.request.path} does not take {method.upper()}")  # before any token check
        if self.request.method not in ("GET", "HEAD", "OPTIONS"):
            self._check_same_origin()
            RequestHandler.check_xsrf_cookie(self)  # the token of the page (or script) that read the cookie
        else:
            self.xsrf_token  # noqa: B018 - sets the _xsrf cookie a later POST must echo

    def _check_credentials(self) -> None:
        check_access(self.explorer, self)

    def _check_same_origin(self) -> None:
        """A browser names where a request comes from; one from another site is refused before its token is read."""
        site = self.request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise HTTPError(403, f"a {site} request may not change runs; use the explorer's own pages")
        origin = self.request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc.lower() != self.request.host.lower():
            raise HTTPError(403, f"a request from {origin} may not change runs; use the explorer's own pages")

    def check_xsrf_cookie(self) -> None:
        """Checked in :meth:`prepare` instead, after the credentials: a stranger hears 401, not 403, and the
        check holds whatever the application's settings (Flower's, when mounted there)."""

    # -- answers ------------------------------------------------------------------------------------

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("X-Frame-Options", "DENY")
        self.set_header("Referrer-Policy", "same-origin")
        self.set_header("Content-Security-Policy", PAGE_POLICY)
        self.set_header("Cache-Control", "no-store")

    def write_json(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(_json_dumps(body))

    def finish(self, chunk: Any = None) -> Any:
        if not self._headers_written:
            # How long the server spent on the answer, for a browser's timing panel and the benchmark.
            self.set_header("Server-Timing", f"app;dur={(time.perf_counter() - self._started) * 1000:.2f}")
        return super().finish(chunk)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Every error as ``{"status": code, "message": "…"}``; an unexpected one is logged, never shown."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = _phrase(status_code)
        if isinstance(exc, FluksioError):
            status_code = next(code for kind, code in STATUS_OF if isinstance(exc, kind))
            message = str(exc)
        elif isinstance(exc, HTTPError):
            if exc.log_message:  # Tornado doubles a '%' of a message given without arguments
                message = exc.log_message % exc.args
        elif exc is not None:
            message = f"internal error ({type(exc).__name__}); the explorer's log has the details"
        if status_code == 401:
            self.set_header("WWW-Authenticate", 'Basic realm="fluksio", charset="UTF-8"')
        self.set_status(status_code)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(_json_dumps({"status": status_code, "message": message}))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, (FluksioError, HTTPError)):  # expected: bad input or an outage, said in the answer
            log.info("%s %s: %s", self.request.method, self.request.uri, value)
            return
        super().log_exception(typ, value, tb)

    # -- pages --------------------------------------------------------------------------------------

    def create_template_loader(self, template_path: str) -> template.Loader:
        # Always the explorer's templates, also inside Flower (whose settings name a loader of its own).
        # Tornado keeps the loader per template path, so this runs once per process.
        return template.Loader(str(TEMPLATES), autoescape="xhtml_escape")

    def get_template_path(self) -> str:
        return str(TEMPLATES)

    def get_template_namespace(self) -> dict[str, Any]:
        namespace = super().get_template_namespace()
        namespace.update(base=self.explorer.base, flower=self.explorer.flower, asset=self.asset,
                         json_pretty=lambda value: json.dumps(value, indent=2, default=str, ensure_ascii=False))
        return namespace

    def asset(self, name: str) -> str:
        """The URL of one of the explorer's static files, versioned by its content (cached for good)."""
        version = StaticFileHandler.get_version({"static_path": str(STATIC)}, name)
        return f"{self.explorer.base}/static/{name}?v={version}"

    def arg(self, name: str) -> str | None:
        """A query argument, ``None`` when absent or empty."""
        value = self.get_query_argument(name, None)
        return value.strip() or None if value is not None else None

    def int_arg(self, name: str, default: int | None, least: int, most: int = INT_MAX) -> int | None:
        value = self.arg(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise InvalidRequest(f"{name} must be a whole number, got {value!r}") from None
        if not least <= number <= most:
            bounds = f"from {least} to {most}" if most != INT_MAX else f"at least {least}"
            raise InvalidRequest(f"{name} must be {bounds}, got {number}")
        return number


class NotFound(ExplorerHandler):
    """Any other path under the explorer: a JSON 404, whatever the method."""

    async def prepare(self) -> None:
        self._check_credentials()
        raise HTTPError(404, f"no page or API at {self.request.path}; the runs are at {self.explorer.base or '/'}")


class StaticFiles(StaticFileHandler):
    """The explorer's CSS and script. Versioned URLs (see :meth:`ExplorerHandler.asset`) are cached for good."""

    #: Set on the class :func:`static_files` makes for one explorer.
    explorer: Explorer

    def prepare(self) -> None:
        check_access(self.explorer, self)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 401:
            self.set_header("WWW-Authenticate", 'Basic realm="fluksio", charset="UTF-8"')
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(_json_dumps({"status": status_code, "message": _phrase(status_code)}))


def static_files(explorer: Explorer) -> type[StaticFiles]:
    """The static file handler of one explorer (it asks for the explorer's passwords too)."""
    return type("ExplorerStaticFiles", (StaticFiles,), {"explorer": explorer})


def check_access(explorer: Explorer, handler: RequestHandler) -> None:
    """401 unless the request carries one of the explorer's passwords (when it has any) and passes its
    further check (Flower's login, inside a Flower that has one)."""
    if explorer.credentials:
        given = _basic_credentials(handler.request.headers.get("Authorization", "")).encode()
        # Compared to every entry, in constant time each: the time taken says nothing of the password.
        matches = [hmac.compare_digest(given, entry.encode()) for entry in explorer.credentials]
        if not given or not any(matches):
            raise HTTPError(401, "a user and password are needed (HTTP basic auth)")
    if explorer.authorize is not None and not explorer.authorize(handler):
        raise HTTPError(401, "log in to Flower first, then open the explorer again")


def _phrase(status_code: int) -> str:
    try:
        return HTTPStatus(status_code).phrase
    except ValueError:
        return "error"


def _basic_credentials(header: str) -> str:
    """``user:password`` from an ``Authorization: Basic …`` header, ``""`` when there is none or it is malformed."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic" or not encoded:
        return ""
    try:
        return base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _json_dumps(body: Any) -> str:
    return json.dumps(body, default=str, ensure_ascii=False)
