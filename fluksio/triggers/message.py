"""What an alert says: one JSON body, the Slack text and the email made from it, and the webhook signature.

The body (``format: json``)::

    {"rule": "nightly-failures", "run_id": "01J…", "flow": "train", "status": "error",
     "reason": "node(s) fit failed — fit: ValueError: …", "failed_nodes": ["fit"], "duration_s": 12.3,
     "created_at": "…", "finished_at": "…", "schedule": "nightly", "url": "http://explorer/runs/01J…"}

``url`` is there when the ``explorer_url`` setting is; ``schedule`` is the schedule whose tick started the
run (``null`` otherwise). With a secret, the header ``X-Fluksio-Signature: sha256=<hex>`` is the
HMAC-SHA256 of the exact body bytes under the secret: a receiver recomputes it and compares (in constant
time) before trusting the alert.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime, timezone
from typing import Any

from fluksio.schemas import NodeStatus, RunRecord, RunStatus, unit_of

#: The header that carries a webhook's signature.
SIGNATURE_HEADER = "X-Fluksio-Signature"


def failed_nodes(record: RunRecord) -> list[str]:
    """Nodes whose latest attempt failed, in the order their rows were written."""
    latest: dict[str, str] = {}
    for node in record.nodes:
        key = unit_of(node.node, node.index)
        latest[key] = node.status.value
    return [name for name, status in latest.items() if status == NodeStatus.ERROR.value]


def alert_body(rule: str, record: RunRecord, status: str, explorer_url: str | None) -> dict[str, Any]:
    """The JSON body of an alert about ``record`` (ended ``status``)."""
    body: dict[str, Any] = {
        "rule": rule,
        "run_id": record.id,
        "flow": record.flow,
        "status": status,
        "reason": record.status_reason,
        "failed_nodes": failed_nodes(record),
        "duration_s": None if record.duration_ms is None else record.duration_ms / 1000,
        "created_at": record.created_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
        "schedule": record.schedule,
    }
    if explorer_url:
        body["url"] = f"{explorer_url.rstrip('/')}/runs/{record.id}"
    return body


def sample_record() -> RunRecord:
    """A made-up failed run, for `fluksio alerts test`."""
    now = datetime.now(timezone.utc)
    return RunRecord(id="SAMPLE", flow="sample", status=RunStatus.ERROR, created_at=now, finished_at=now,
                     duration_ms=1500,
                     status_reason="this is a test alert sent by `fluksio alerts test`; no run failed")


def summary(body: dict[str, Any]) -> str:
    """One line a person reads first: the Slack text and the email subject's tail."""
    duration = f" after {body['duration_s']:.1f} s" if body.get("duration_s") is not None else ""
    return f"run {body['run_id']} of flow {body['flow']} ended {body['status']}{duration}"


def slack_text(body: dict[str, Any]) -> str:
    lines = [f"fluksio: {summary(body)}"]
    if body.get("reason"):
        lines.append(str(body["reason"]))
    if body.get("url"):
        lines.append(str(body["url"]))
    return "\n".join(lines)


def encode(body: dict[str, Any], format: str) -> bytes:
    """The bytes a webhook POSTs (and signs)."""
    payload = {"text": slack_text(body)} if format == "slack" else body
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, data: bytes) -> str:
    """The ``X-Fluksio-Signature`` header's value for ``data``."""
    return "sha256=" + hmac.new(secret.encode(), data, hashlib.sha256).hexdigest()


def email_text(body: dict[str, Any]) -> str:
    fields = ["run_id", "flow", "status", "reason", "failed_nodes", "duration_s", "finished_at", "schedule", "url"]
    lines = [summary(body), ""]
    lines += [f"{name}: {body[name]}" for name in fields if body.get(name) not in (None, [], "")]
    lines += ["", f"(alert rule {body['rule']})"]
    return "\n".join(lines)
