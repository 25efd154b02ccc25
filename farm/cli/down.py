"""``farm down``: stop a farm and leave nothing behind.

Asks the controller to shut down (every sandbox stopped, sockets and pid file
removed) and waits for its process to end. If no controller answers, removes
what a dead one left in the state dir: a hung controller process (pid file),
orphan sandboxes, a stale control socket. With nothing running it says so and
exits 0 (``farm down`` is idempotent).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from farm.cli._farm import add_target_args, resolve_target


def add_parser(sub: Any) -> None:
    p = sub.add_parser("down", help="stop a running farm (every sandbox and the controller)")
    add_target_args(p)
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="then kill the controller (default 60)",
    )
    p.set_defaults(func=run)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, 10):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 5)


def run(args: argparse.Namespace) -> int:
    from orchestration.client import FarmClient
    from orchestration.errors import FarmNotRunningError

    target = resolve_target(args)
    try:
        with FarmClient(target.address) as client:
            status = client.status(timeout=5.0)
            client.shutdown()
    except FarmNotRunningError:
        status = None
    if status is not None:
        if not _wait_gone(status.pid, args.timeout):
            print(f"farm: the controller (pid {status.pid}) did not stop in time; killing it")
            _kill(status.pid)
        removed = _cleanup(Path(status.state_dir), target.address)
        extra = f"; removed {len(removed)} leftovers" if removed else ""
        print(
            f"farm stopped: {len(status.sandboxes)} sandboxes and the controller "
            f"(pid {status.pid}) at {target.address}{extra}"
        )
        return 0
    removed = _cleanup(target.state_dir, target.address) if target.state_dir else []
    if removed:
        print(f"farm: no controller answered at {target.address}; removed what it left:")
        for what in removed:
            print(f"  {what}")
    else:
        print(f"farm: nothing is running at {target.address}")
    return 0


def _cleanup(state_dir: Path | None, address: str) -> list[str]:
    """Remove a dead farm's leftovers under ``state_dir``; returns what was removed."""
    from farm.address import Address, unix_socket_in_use
    from orchestration.backends.local import LocalBackend
    from orchestration.statefiles import read_pid_file, remove_pid_file

    removed: list[str] = []
    if state_dir is None or not state_dir.is_dir():
        return removed
    info = read_pid_file(state_dir)
    spec_path = info.get("spec_path") if info is not None else None
    if info is not None:
        pid = info.get("pid")
        if isinstance(pid, int) and pid != os.getpid() and not _gone(pid):
            _kill(pid)
            removed.append(f"controller process {pid} (not answering)")
        remove_pid_file(state_dir)
        removed.append("pid file controller.json")
    from orchestration.backends.docker import orphan_backend

    backends = [LocalBackend(state_dir), orphan_backend(state_dir)]
    backends.append(_ray_orphan_backend(state_dir, spec_path, removed))
    for backend in backends:
        for orphan in backend.list_orphans() if backend else []:
            backend.remove_orphan(orphan)
            removed.append(f"orphan sandbox {orphan.sandbox_id} ({orphan.description})")
        if backend is not None:
            asyncio.run(backend.close())
    addr = Address.parse(address)
    path = addr.unix_path
    if addr.is_unix and path and os.path.exists(path) and not unix_socket_in_use(path):
        os.unlink(path)
        removed.append(f"stale control socket {path}")
    for d in ("run", "sandboxes"):
        with contextlib.suppress(OSError):
            (state_dir / d).rmdir()
    return removed


def _ray_orphan_backend(state_dir: Path, spec_path: Any, notes: list[str]) -> Any:
    """The ray backend of the dead farm's spec, to find its detached actors (None if the
    spec has no ray groups on an existing cluster, or the cluster cannot be reached)."""
    if not isinstance(spec_path, str) or not spec_path or not os.path.isfile(spec_path):
        return None
    try:
        from orchestration.backends.ray import RayBackend, ray_address
        from orchestration.spec import load_spec

        spec = load_spec(spec_path)
        if not any(g.backend == "ray" for g in spec.sandboxes):
            return None
        if ray_address(spec) == "local":  # the controller's own cluster died with it
            return None
        backend = RayBackend(state_dir, spec)
        backend.list_orphans()  # connects: fails here if the cluster is gone
        return backend
    except Exception as e:  # noqa: BLE001 - cleanup goes on without the ray part
        notes.append(f"ray orphans not checked ({type(e).__name__}: {e})")
        return None
