"""One training process per run folder: a lock file that a dead process does not leave stuck.

Why: two ``jobi-tf train`` processes writing the same folder would interleave checkpoints
and metrics. The lock is ``RUN/.lock`` created with ``O_EXCL`` and holding the owner's host
name and PID. A lock whose owner is gone (same host, PID no longer running) is stale and is
taken over, so a killed run can always be resumed; a lock held by another host cannot be
checked and is respected, with its path in the message so a user can delete it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

from jobi_tf.runtime.errors import JobiError

__all__ = ["RunLock", "RunLockedError"]

logger = logging.getLogger(__name__)


class RunLockedError(JobiError):
    """Another live process holds the run folder's lock."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RunLock:
    """Context manager holding ``run_dir/.lock`` while a run trains.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d, RunLock(d):
    ...     (Path(d) / ".lock").exists()
    True
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / ".lock"
        self._owner = {"host": socket.gethostname(), "pid": os.getpid()}

    def __enter__(self) -> RunLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JobiError(f"{self.path.parent}: cannot create the run folder ({exc.strerror or exc})") from None
        for _ in range(2):  # a second try after removing a stale lock
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._check_existing()
                continue
            except OSError as exc:
                raise JobiError(f"{self.path}: cannot write the run lock ({exc.strerror or exc})") from None
            with os.fdopen(fd, "w") as f:
                json.dump(self._owner, f)
            return self
        raise RunLockedError(f"{self.path}: could not take the run lock (another process keeps creating it)")

    def _check_existing(self) -> None:
        try:
            owner = json.loads(self.path.read_text(encoding="utf-8"))
            host, pid = owner["host"], int(owner["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            host, pid = None, None  # half-written by a process killed while creating it
        if host is not None and host != self._owner["host"]:
            raise RunLockedError(
                f"{self.path.parent}: in use by pid {pid} on {host}; if that run is dead, delete {self.path}"
            )
        if pid is not None and pid != os.getpid() and _alive(pid):
            raise RunLockedError(
                f"{self.path.parent}: another jobi-tf train (pid {pid}) is using this run folder; "
                "wait for it to finish or use another --out"
            )
        logger.warning("%s: removing a stale lock (pid %s is not running)", self.path, pid)
        self.path.unlink(missing_ok=True)

    def __exit__(self, *exc) -> None:
        try:
            owner = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if owner == self._owner:
            self.path.unlink(missing_ok=True)
