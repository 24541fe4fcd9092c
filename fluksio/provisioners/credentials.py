"""Where a Slurm job's secrets wait for it: a file only the submitting user can read, never the script.

Slurm keeps every batch script in its spool, shows it to admins (``scontrol write batch_script``) and
may archive it in its accounting database, so a setting that carries a password (a broker, result
backend or database URL with one) must not be written into the script. It goes into a file of its own
instead, which the script sources and removes as soon as the job starts; the provisioner removes it
too once the request stops waiting (attached, cancelled, failed), so a job that never starts leaves
nothing behind.

The file lies in :data:`CREDENTIALS_DIR` under the job's working directory as the submitting side sees
it: the submitting directory for a local ``sbatch``, the home directory on the login node through ssh
(where ``sbatch`` runs, so where the job starts). Slurm itself needs that directory on the compute
node (it starts the job there and writes its output there), so this adds no assumption about shared
filesystems beyond the one Slurm, the artifact store and the flow sources already make. The folder is
``0700`` and each file ``0600``, created exclusively (never through an existing file or link).

Through ssh the file is written on the login node by a short ``sh`` command whose standard input is
the file's content (:data:`REMOTE_WRITE`): the secret travels inside the ssh connection, never on a
command line (which ``ps`` shows), and the driver's host need share no filesystem with the cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The credentials folder, relative to the job's working directory on the submitting side.
CREDENTIALS_DIR = ".fluksio/credentials"

#: ``sh -c REMOTE_WRITE sh FOLDER NAME``, the content on standard input: creates FOLDER (``0700``) and
#: FOLDER/NAME (``0600``, exclusively: ``set -C``), and prints FOLDER's absolute path. One line, no
#: ``!``: a login shell that is csh reads it too.
REMOTE_WRITE = ('umask 077 && mkdir -p "$1" && chmod 700 "$1" && cd "$1" && set -C && '
                '{ cat > "$2" || { rm -f "$2"; exit 1; }; } && pwd')


def file_name(request_id: str) -> str:
    """The credentials file of one machine request (its id is a random hex string: never guessed)."""
    return f"{request_id}.env"


def write_private(folder: Path, name: str, text: str) -> Path:
    """Write ``text`` to ``folder/name``, readable by this user only; returns the file's path.

    The folder is made ``0700`` (an existing one too: nobody else may list it); the file is created
    with ``O_EXCL`` and ``O_NOFOLLOW``, so an existing file or a planted link is an error, never written
    through. Raises :class:`OSError`.
    """
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            os.fchmod(handle.fileno(), 0o600)  # exactly, whatever the umask
            handle.write(text)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path
