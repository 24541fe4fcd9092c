"""The artifact store an installation's settings name: one place decides, every process asks here.

``FLUKSIO_ARTIFACTS_DIR`` is a folder (the folder store, read in place) or an fsspec URL (the object
store, read through the local cache ``FLUKSIO_ARTIFACTS_CACHE``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fluksio.artifacts.cache import ArtifactCache
from fluksio.artifacts.local import LocalArtifactStore
from fluksio.artifacts.remote import ObjectArtifactStore
from fluksio.artifacts.store import ArtifactStore
from fluksio.errors import ConfigError
from fluksio.settings import Settings, redact_url

#: Attempts per object-store request (botocore's "standard" retries: throttling, 5xx, lost connections).
S3_ATTEMPTS = 3


def is_url(location: str | Path) -> bool:
    return isinstance(location, str) and "://" in location


def open_store(settings: Settings, check: bool = False) -> ArtifactStore:
    """The store of ``settings.artifacts_dir``. ``check``: first make sure it can be reached (a worker or a
    client starting), raising :class:`ConfigError` naming the URL (never its secrets) when not."""
    location = settings.artifacts_dir
    if not is_url(location):
        return LocalArtifactStore(location)
    store = object_store(settings)
    if check:
        store.check()
    return store


def object_store(settings: Settings) -> ObjectArtifactStore:
    url = str(settings.artifacts_dir)
    protocol = url.split("://", 1)[0].lower()
    endpoint = _endpoint(settings) if protocol in ("s3", "s3a") else None
    where = redact_url(url) + (f" at {redact_url(endpoint)}" if endpoint else "")
    _require_transport(protocol, where)
    cache = ArtifactCache(settings.artifacts_cache, settings.artifacts_cache_mb << 20)
    return ObjectArtifactStore(url, cache, _options(protocol, settings, endpoint), where)


def _endpoint(settings: Settings) -> str | None:
    # botocore reads these too, but naming the endpoint in messages needs to know which one it is.
    return (settings.artifacts_endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL") or None)


def _require_transport(protocol: str, where: str) -> None:
    try:
        import fsspec  # type: ignore[import-untyped]

        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        package = "'fluksio[s3]'" if protocol in ("s3", "s3a") else f"the fsspec package for {protocol}://"
        raise ConfigError(f"FLUKSIO_ARTIFACTS_DIR={where} needs {package} installed (pip install); "
                          f"{exc}") from None
    except ValueError:
        raise ConfigError(f"FLUKSIO_ARTIFACTS_DIR={where}: {protocol}:// is no storage protocol fsspec knows; "
                          "use a folder, s3://bucket/prefix, gs://, az:// or file://") from None


def _options(protocol: str, settings: Settings, endpoint: str | None) -> dict[str, Any]:
    # One filesystem object per store: fsspec would otherwise share it between stores of other settings.
    options: dict[str, Any] = {"skip_instance_cache": True}
    if protocol in ("s3", "s3a"):
        timeout = settings.artifacts_timeout_s
        options.update(
            # Listings are never cached: "does this object exist" must ask the bucket (the run cache's honesty).
            use_listings_cache=False,
            # One part at a time: s3fs would otherwise hold ten 50 MB parts of a download in memory at once.
            max_concurrency=1,
            config_kwargs={"connect_timeout": timeout, "read_timeout": timeout,
                           "retries": {"max_attempts": S3_ATTEMPTS, "mode": "standard"}},
        )
        if endpoint:
            options["endpoint_url"] = endpoint
    elif protocol == "file":
        options["auto_mkdir"] = True
    return options
