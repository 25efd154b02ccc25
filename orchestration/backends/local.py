"""The local backend: each sandbox is a ``farm serve`` child process.

* endpoint: a unix socket ``<state_dir>/run/<id>.<incarnation>.sock`` (a new path
  per incarnation, so a client of a dead incarnation can never reach its
  replacement);
* its own process group (session); stop sends SIGTERM to the group, waits
  ``grace_s``, then SIGKILLs the group and removes the socket file;
* limits: ``address_space_mb`` -> RLIMIT_AS and ``pids`` -> RLIMIT_NPROC, set by
  a tiny exec wrapper; ``memory_mb``/``pids`` are also watched through
  :meth:`LocalBackend.usage` (see :class:`orchestration.spec.Limits`);
* output: ``<state_dir>/logs/<id>.log`` (the previous incarnation's in ``<id>.prev.log``);
* a record ``<state_dir>/sandboxes/<id>.json`` (pid, start time, controller pid)
  lets :meth:`LocalBackend.list_orphans` find what a crashed controller left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from farm.errors import SandboxUnavailableError
from farm.server.process import ServerProcess
from orchestration.backends.base import Backend, Orphan, SandboxHandle, SandboxRequest, Usage
from orchestration.errors import SandboxStartError
from orchestration.spec import SandboxGroup

_LIMITS_EXEC = str(Path(__file__).with_name("_limits_exec.py"))


def _killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _unlink(path: str | Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def describe_exit(code: int | None) -> str:
    """``killed by SIGKILL`` / ``exited with code 1``."""
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class LocalSandboxProcess(ServerProcess):
    """``farm serve`` for one sandbox: limits, a log in the state dir, group stop."""

    def __init__(self, group: SandboxGroup, address: str, log_path: Path) -> None:
        super().__init__(
            group.env,
            address=address,
            args=group.server.args(),
            env_kwargs=json.dumps(group.env_kwargs),
            startup_timeout_s=group.startup_timeout_s,
            environ={"PYTHONUNBUFFERED": "1", **group.environ},
        )
        self._log_path = str(log_path)
        self._limits = group.limits

    def command(self, ready_file: str) -> list[str]:
        cmd = super().command(ready_file)
        lim = self._limits
        if lim.address_space_mb is None and lim.pids is None:
            return cmd
        as_bytes = "-" if lim.address_space_mb is None else str(lim.address_space_mb << 20)
        nproc = "-" if lim.pids is None else str(lim.pids)
        return [sys.executable, "-S", _LIMITS_EXEC, as_bytes, nproc, "--", *cmd]

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM the process group, wait ``timeout``, SIGKILL the group."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # start_new_session: the leader's pid is the group id
        if self.proc.poll() is None:
            _killpg(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _killpg(pgid, signal.SIGKILL)
                self.proc.wait(10)
        _killpg(pgid, signal.SIGKILL)  # whatever of the group outlived its leader
        if hasattr(self, "_log"):
            self._log.close()
        self._tmp.cleanup()
        return self.proc.returncode


class LocalBackend(Backend):
    """Sandboxes as local ``farm serve`` processes (see the module docstring)."""

    name = "local"

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir)
        self.run_dir = state_dir / "run"
        self.log_dir = state_dir / "logs"
        self.record_dir = state_dir / "sandboxes"

    def socket_path(self, request: SandboxRequest) -> Path:
        return self.run_dir / f"{request.sandbox_id}.{request.incarnation}.sock"

    async def start(self, request: SandboxRequest) -> SandboxHandle:
        for d in (self.run_dir, self.log_dir, self.record_dir):
            d.mkdir(parents=True, exist_ok=True)
        sock = self.socket_path(request)
        _unlink(sock)
        log = self.log_dir / f"{request.sandbox_id}.log"
        if log.exists():
            os.replace(log, self.log_dir / f"{request.sandbox_id}.prev.log")
        proc = LocalSandboxProcess(request.group, f"unix://{sock}", log)
        try:
            endpoint = await asyncio.to_thread(proc.start)
        except SandboxUnavailableError as e:
            _unlink(sock)
            raise SandboxStartError(
                f"sandbox {request.sandbox_id} ({request.group.env}) did not start: "
                f"{_tail(str(e.args[0]))}"
            ) from None
        handle = SandboxHandle(
            request.sandbox_id, request.incarnation, self.name, endpoint, proc.pid, proc
        )
        self._write_record(handle)
        return handle

    async def stop(self, handle: SandboxHandle, grace_s: float = 5.0) -> None:
        proc: LocalSandboxProcess = handle.detail
        await asyncio.to_thread(proc.stop, grace_s)
        _unlink(handle.endpoint.removeprefix("unix://"))
        _unlink(self.record_dir / f"{handle.sandbox_id}.json")

    def exit_reason(self, handle: SandboxHandle) -> str | None:
        proc: LocalSandboxProcess = handle.detail
        assert proc.proc is not None
        code = proc.proc.poll()
        return None if code is None else describe_exit(code)

    def usage(self, handle: SandboxHandle) -> Usage:
        try:
            root = psutil.Process(handle.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return Usage()
        rss = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
        return Usage(memory_mb=rss / (1 << 20), pids=len(procs))

    # orphans --------------------------------------------------------------

    def _write_record(self, handle: SandboxHandle) -> None:
        record = {
            "sandbox_id": handle.sandbox_id,
            "incarnation": handle.incarnation,
            "endpoint": handle.endpoint,
            "pid": handle.pid,
            "create_time": _create_time(handle.pid),
            "controller_pid": os.getpid(),
            "started_at": time.time(),
        }
        path = self.record_dir / f"{handle.sandbox_id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)

    def list_orphans(self) -> list[Orphan]:
        orphans = []
        if not self.record_dir.is_dir():
            return []
        for path in sorted(self.record_dir.glob("*.json")):
            try:
                rec = json.loads(path.read_text())
            except (OSError, ValueError):
                orphans.append(
                    Orphan(path.stem, self.name, "", "unreadable record", {"path": path})
                )
                continue
            if rec.get("controller_pid") != os.getpid() and _alive(rec.get("controller_pid")):
                continue  # another live controller's sandbox
            alive = _same_process(rec.get("pid"), rec.get("create_time"))
            desc = f"pid {rec.get('pid')}" + ("" if alive else " (already gone)")
            orphans.append(
                Orphan(
                    rec["sandbox_id"],
                    self.name,
                    rec.get("endpoint", ""),
                    desc,
                    {**rec, "path": path},
                )
            )
        return orphans

    def remove_orphan(self, orphan: Orphan) -> None:
        rec: dict[str, Any] = orphan.detail
        pid = rec.get("pid")
        if isinstance(pid, int) and _same_process(pid, rec.get("create_time")):
            _killpg(pid, signal.SIGKILL)
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).wait(5)
        if orphan.endpoint.startswith("unix://"):
            _unlink(orphan.endpoint.removeprefix("unix://"))
        _unlink(rec["path"])


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _create_time(pid: int | None) -> float | None:
    try:
        return psutil.Process(pid).create_time() if pid else None
    except psutil.Error:
        return None


def _alive(pid: Any) -> bool:
    """True if ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    if not isinstance(pid, int):
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _same_process(pid: Any, create_time: Any) -> bool:
    """True if ``pid`` runs and is the process recorded (not a reused pid)."""
    if not isinstance(pid, int):
        return False
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(p.create_time() - float(create_time)) < 1.0
    except psutil.Error:
        return False
