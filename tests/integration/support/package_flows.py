"""Source trees of the shipped-code tests: a worker's own flows (``FLUKSIO_FLOWS``) and versions of a flow that
travels as a code package, each with a helper module of the same name (``helpers``) holding another constant.

They are written into a test's folder and packed from there (flows/package.py), as a submitter's files are.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from fluksio.artifacts.artifact import Artifact
from fluksio.artifacts.store import ArtifactStore
from fluksio.flows.package import CodePackage, pack

#: The flow of every package version: a node that says what it sees (append :data:`OVERDUE` and :data:`HANG`
#: for nodes that overrun their timeout or never end).
SHIPPED_FLOW = '''
import os
import sys
import time
from pathlib import Path

import helpers
from fluksio import Flow

MARKS = Path(os.environ.get("TEST_FLUKSIO_MARKS", "/tmp/fluksio-test-marks"))

shipped = Flow("shipped", inputs={"tag": (str, "")})


def leave_pid_mark(tag):
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"{tag}.{os.getpid()}").write_text("started")


@shipped.node(provides="seen", requires=["tag"])
def look(tag):
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\\0", b" ").decode().strip()
    flow_files = sorted(str(module.__file__) for name, module in list(sys.modules.items())
                        if name.startswith("fluksio_flowfile_"))
    print("looked from", helpers.CONSTANT)
    return {"constant": helpers.CONSTANT, "helpers": helpers.__file__, "flow_files": flow_files,
            "devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(), "parent": parent}
'''

#: A node of :data:`SHIPPED_FLOW` that runs past its one-second timeout.
OVERDUE = '''

@shipped.node(provides="late", requires=["tag"], timeout_s=1)
def overdue(tag):
    leave_pid_mark(tag)
    print("going to sleep", flush=True)
    time.sleep(60)
    return tag
'''

#: A node of :data:`SHIPPED_FLOW` that never ends.
HANG = '''

@shipped.node(provides="never", requires=["tag"])
def hang(tag):
    leave_pid_mark(tag)
    time.sleep(3600)
'''

#: A node of :data:`SHIPPED_FLOW` that stores an artifact made of its tag.
BLOB = '''

@shipped.node(provides="blob", requires=["tag"])
def blob(tag):
    from fluksio import Artifact

    return Artifact.from_bytes(f"made for {tag}".encode())
'''

#: A node of :data:`SHIPPED_FLOW` that writes to its process's stderr past Python, then ends that process.
CRASH = '''

@shipped.node(provides="crashed", requires=["tag"])
def crash(tag):
    os.write(2, f"dying from {helpers.CONSTANT}\\n".encode())
    os._exit(3)
'''

#: A flow file that fails as it is imported, on line 4.
BROKEN_FLOW = '''from fluksio import Flow

shipped = Flow("shipped")
settings = {"rate": 1 / 0}
'''

#: The worker's own flows: a ``helpers`` module too, which no package must see.
RESIDENT_FLOW = '''
import helpers
from fluksio import Flow

resident = Flow("resident")


@resident.node(provides="constant")
def constant():
    return helpers.CONSTANT
'''


def write_tree(folder: Path, flow: str, constant: str) -> Path:
    """``folder/flows.py`` (``flow``'s text) beside ``folder/helpers.py`` holding ``constant``; the flow file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "flows.py").write_text(textwrap.dedent(flow))
    (folder / "helpers.py").write_text(f"CONSTANT = {constant!r}\n")
    return folder / "flows.py"


def shipped_package(folder: Path, constant: str, store: ArtifactStore, flow: str = SHIPPED_FLOW) -> CodePackage:
    """The code package of a version of the shipped flow whose helper holds ``constant``, put in ``store`` as
    a submit puts it."""
    package = pack(str(write_tree(folder, flow, constant)))
    store.put(Artifact.from_bytes(package.data))
    return package
