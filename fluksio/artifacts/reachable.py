"""Whether an object store can be used at all, asked once when a process starts.

A worker whose bucket is missing, whose credentials are refused or whose endpoint does not answer
must say so when it starts, not fail a run an hour later: one request to the bucket itself (HEAD on
S3) tells the three apart, and each becomes a :class:`ConfigError` that says what to fix.
"""

from __future__ import annotations

import re
from typing import Any

from fluksio.errors import ConfigError

#: ``scheme://user:password@`` inside a message: the password is hidden before the message is shown.
_CREDENTIALS_IN_URL = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@\"']*:)[^\s@/\"']+@")


def scrub(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``."""
    return _CREDENTIALS_IN_URL.sub(r"\1***@", text)


def check_reachable(fs: Any, root: str, where: str) -> None:
    """Raise :class:`ConfigError` unless the bucket (or folder) at ``root`` of ``fs`` can be reached.

    ``where``: the store as messages name it (its URL, and endpoint, without secrets).
    """
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    setting = f"FLUKSIO_ARTIFACTS_DIR={where}"
    if "file" in protocols or "local" in protocols:
        try:
            fs.makedirs(root, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{setting}: cannot create the folder {root}: {exc}") from None
        return
    container = root.split("/", 1)[0]
    if not container:
        return  # a filesystem without buckets (memory://): nothing to reach
    try:
        fs.info(container)
    except FileNotFoundError:
        raise ConfigError(f"{setting}: bucket {container!r} does not exist; create it (e.g. `aws s3 mb "
                          f"s3://{container}`) or correct the URL") from None
    except PermissionError as exc:
        raise ConfigError(f"{setting}: the object store refused these credentials for bucket {container!r} "
                          f"({scrub(str(exc))}); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                          "AWS_PROFILE) in the environment of this process") from None
    except Exception as exc:
        raise ConfigError(f"{setting}: cannot reach the object store ({type(exc).__name__}: {scrub(str(exc))}); "
                          "check FLUKSIO_ARTIFACTS_ENDPOINT_URL (or AWS_ENDPOINT_URL) and the network") from None
