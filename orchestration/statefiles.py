"""Files a controller keeps in its state dir.

* ``controller.lock``: an ``flock`` held for the controller's lifetime, so two
  controllers never share a state dir (their sockets and records would collide);
  the empty file itself stays;
* ``controller.json``: the pid/state file (pid, control address, metrics
  address, spec path, start time), written once the control endpoint serves and
  removed on shutdown.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from orchestration.errors import FarmAlreadyRunningError

LOCK_FILE = "controller.lock"
PID_FILE = "controller.json"


class StateDirLock:
    """An exclusive, non-blocking ``flock`` on ``<state_dir>/controller.lock``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            info = read_pid_file(self.path.parent) or {}
            raise FarmAlreadyRunningError(
                f"another farm controller (pid {info.get('pid', '?')}, control address "
                f"{info.get('control_address', '?')}) already uses the state dir "
                f"{self.path.parent}; stop it with `farm down` or use another state_dir"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            # the (empty) lock file stays: unlinking it would let two controllers lock
            # two different files of the same name
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def write_pid_file(directory: Path, **fields: Any) -> Path:
    path = directory / PID_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "written_at": time.time(), **fields}))
    os.replace(tmp, path)
    return path


def read_pid_file(state_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((state_dir / PID_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove_pid_file(state_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(state_dir / PID_FILE)
