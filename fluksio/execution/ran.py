"""What a node call that succeeded made, wherever it ran (this process, or a child on its GPUs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluksio.messages import MadeArtifact


@dataclass(frozen=True, slots=True)
class Ran:
    """A successful call's encoded outputs (JSON, artifacts as references), the artifacts it stored, its logs."""

    outputs: dict[str, Any]
    artifacts: tuple[MadeArtifact, ...]
    logs: str
