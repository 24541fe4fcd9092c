"""Flows the security tests run on real workers (registered beside cluster_flows.py through FLUKSIO_FLOWS)."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path

from fluksio import Flow, Secret

#: Folder where nodes leave marks the tests count (set by the test harness).
MARKS = Path(os.environ.get("TEST_FLUKSIO_MARKS", "/tmp/fluksio-test-marks"))

guarded = Flow("guarded", inputs={"tag": str}, outputs=["x"])


@guarded.node(provides="x", cache=False)
def mark_then_wait(tag: str) -> str:
    """Leaves ``MARKS/<tag>.ran.<ns>`` each time it runs, then waits (at most 60 s) for ``MARKS/<tag>.go``."""
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.ran.{time.time_ns()}").write_text("ran")
    deadline = time.monotonic() + 60
    while not (MARKS / f"{tag}.go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return tag


with_token = Flow("with_token", inputs={"token": Secret, "tag": str}, outputs=["length", "digest"])


@with_token.node(provides=["length", "digest"], cache=False)
def use_token(token: Secret, tag: str) -> dict:
    """Uses the value the way a careless node would (prints it, logs it, formats the object), and proves it
    received it by the digest it leaves in ``MARKS/<tag>.digest`` and returns (the digest, never the value)."""
    value = token.value
    print(f"calling the API with {value}")
    logging.getLogger("user.node").warning("token in use: %s (object: %s)", value, token)
    digest = hashlib.sha256(value.encode()).hexdigest()
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.digest").write_text(digest)
    return {"length": len(value), "digest": digest}


leaky = Flow("leaky", inputs={"token": Secret}, outputs=["copy"])


@leaky.node(provides="copy", cache=False)
def return_the_value(token: Secret) -> str:
    return "the token is " + token.value


elsewhere = Flow("elsewhere", inputs={"token": Secret}, outputs=["length"])


@elsewhere.node(provides="length", device="bare", cache=False)
def on_a_worker_without_it(token: Secret) -> int:
    return len(token.value)


from_folder = Flow("from_folder", inputs={"token": Secret}, outputs=["digest"])


@from_folder.node(provides="digest", device="folder", cache=False)
def read_from_folder(token: Secret) -> str:
    return hashlib.sha256(token.value.encode()).hexdigest()
