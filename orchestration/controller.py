"""The controller: starts a farm's sandboxes, keeps them healthy, and leases them.

Control logic:

* **Supervision.** Each sandbox slot has a supervisor task: start an incarnation
  through its backend (healthy once its first Health check passes), then watch
  it every ``POLL_S`` (process exit) and every ``health.interval_s`` (farm's
  Health RPC, limit watchdog). It is replaced when
  its process ends, after ``health.failures`` failed checks in a row, or when it
  is over ``limits.memory_mb`` / ``limits.pids``.
* **Restart backoff.** The n-th restart in a row waits
  :func:`~orchestration.state.restart_delay` (0, then ``backoff_s * 2**(n-2)``
  capped at ``backoff_max_s``); n returns to 0 once an incarnation stayed healthy
  for ``restart.stable_s``. A failed start counts as a restart in a row.
* **Leases.** A lease holds one healthy sandbox for one holder. It expires
  ``ttl_s`` after the last heartbeat (checked every ``REAP_S``). An expired or
  reset-released lease's sandbox is *reset* (restarted: a fresh process, so
  nothing of the old holder survives) before it returns to the pool. When a
  leased sandbox dies, its lease ends at once; the holder's next heartbeat gets
  FAILED_PRECONDITION saying so (its episode was truncated for infrastructure
  reasons), and the slot is replaced for the next holder.
* **Waiting.** A lease for a kind the farm has no sandboxes of fails at once
  (NOT_FOUND); when all are busy it waits up to ``wait_timeout_s`` (capped by
  ``control.max_lease_wait_s``) for one to become free, then fails
  (RESOURCE_EXHAUSTED). Free sandboxes go to the one leased least so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections import OrderedDict
from pathlib import Path

import grpc

from farm.address import Address, unix_socket_in_use
from farm.client.session import health as health_rpc
from farm.errors import FarmError
from orchestration.backends import Backend, SandboxRequest, make_backend
from orchestration.errors import (
    FarmAlreadyRunningError,
    LeaseLostError,
    LeaseTimeoutError,
    NoSuchKindError,
    OrchestrationError,
    SandboxStartError,
    UnknownLeaseError,
)
from orchestration.metrics import FarmMetrics
from orchestration.spec import FarmSpec
from orchestration.state import Lease, Sandbox, SandboxState, restart_delay
from orchestration.statefiles import StateDirLock, remove_pid_file, write_pid_file

log = logging.getLogger("farm.controller")

POLL_S = 0.1  # how often a supervisor looks at its process
REAP_S = 0.25  # how often expired leases are looked for
ENDED_LEASES_KEPT = 10_000  # ended leases remembered to explain a late heartbeat
STOP_GRACE_S = 5.0  # SIGTERM -> SIGKILL for a sandbox being stopped or reset
HUNG_GRACE_S = 1.0  # ... for one that failed its health checks (likely hung)


class ShuttingDownError(OrchestrationError):
    """The farm is shutting down (UNAVAILABLE to lease callers)."""


class Controller:
    """One farm: its sandboxes, leases, control endpoint and metrics.

    ``await start()`` binds the control endpoint and starts every sandbox (it does
    not wait for them to be healthy: see :meth:`all_healthy`); ``await
    shutdown()`` stops everything and removes the control socket and pid file.
    """

    def __init__(
        self,
        spec: FarmSpec,
        *,
        spec_path: str = "",
        backends: dict[str, Backend] | None = None,
    ) -> None:
        self.spec = spec
        self.spec_path = spec_path
        self.state_dir: Path = spec.state_path
        self.address = spec.control_address
        self.metrics = FarmMetrics()
        self.sandboxes: dict[str, Sandbox] = {}
        for group in spec.sandboxes:
            for i in range(group.count):
                sid = f"{group.group}-{i}"
                self.sandboxes[sid] = Sandbox(sid, group)
        self._backends: dict[str, Backend] = dict(backends or {})
        for group in spec.sandboxes:  # unknown/unbuilt backends fail here, before anything runs
            if group.backend not in self._backends:
                self._backends[group.backend] = make_backend(group.backend, self.state_dir, spec)
        self.leases: dict[str, Lease] = {}
        self._ended: OrderedDict[str, str] = OrderedDict()
        self._lock = StateDirLock(self.state_dir)
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        self._stopping = False
        self._stopped = asyncio.Event()
        self._shutdown_task: asyncio.Task[None] | None = None
        self.started_at = time.monotonic()
        self.orphans_removed = 0

    # lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        addr = Address.parse(self.address)
        if addr.is_unix and unix_socket_in_use(addr.unix_path or ""):
            raise FarmAlreadyRunningError(
                f"a farm is already running at {self.address}; see `farm status`, "
                "stop it with `farm down`"
            )
        self._lock.acquire()
        try:
            self._remove_orphans()
            await self._serve(addr)
            if self.spec.control.metrics_port is not None:
                self.metrics.serve(self.spec.control.metrics_port)
            write_pid_file(
                self.state_dir,
                control_address=self.address,
                metrics_address=self.metrics.address,
                spec_path=self.spec_path,
                state_dir=str(self.state_dir),
            )
        except BaseException:
            await self._close_endpoint()
            self._lock.release()
            raise
        self.started_at = time.monotonic()
        loop = asyncio.get_running_loop()
        for sb in self.sandboxes.values():
            self._tasks.append(loop.create_task(self._supervise(sb), name=f"sup-{sb.sandbox_id}"))
        self._tasks.append(loop.create_task(self._reap_leases(), name="lease-reaper"))
        self._notify()
        log.info("farm controller at %s: %d sandboxes", self.address, len(self.sandboxes))

    async def _serve(self, addr: Address) -> None:
        from farm.proto import control_pb2_grpc
        from orchestration.service import ControlService

        if addr.is_unix:
            path = addr.unix_path or ""
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # stale: nobody answered on it above, and we hold the lock
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        control_pb2_grpc.add_ControlServicer_to_server(ControlService(self), server)
        try:
            port = server.add_insecure_port(addr.grpc_target())
        except RuntimeError as e:
            raise FarmAlreadyRunningError(f"cannot listen on {self.address}: {e}") from None
        if not addr.is_unix and port == 0:
            raise FarmAlreadyRunningError(f"cannot listen on {self.address}: address in use")
        await server.start()
        self._server = server

    def request_shutdown(self) -> asyncio.Task[None]:
        """Start shutting down (idempotent); the task finishes when everything stopped."""
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.get_running_loop().create_task(self._shutdown())
        return self._shutdown_task

    async def shutdown(self) -> None:
        await self.request_shutdown()

    async def wait(self) -> None:
        """Until the farm has shut down."""
        await self._stopped.wait()

    async def _shutdown(self) -> None:
        log.info("shutting down the farm at %s", self.address)
        self._stopping = True
        for sb in self.sandboxes.values():
            sb.wake.set()
        self._notify()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                log.error("supervisor failed during shutdown: %r", r)
        for backend in self._backends.values():
            with contextlib.suppress(Exception):
                await backend.close()
        await self._close_endpoint()
        self.metrics.close()
        remove_pid_file(self.state_dir)
        for d in ("run", "sandboxes"):
            with contextlib.suppress(OSError):
                (self.state_dir / d).rmdir()  # only if empty
        self._lock.release()
        self._stopped.set()
        log.info("farm stopped")

    async def _close_endpoint(self) -> None:
        if self._server is not None:
            await self._server.stop(1.0)
            self._server = None
        addr = Address.parse(self.address)
        if addr.is_unix:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(addr.unix_path or "")

    def _remove_orphans(self) -> None:
        for backend in self._backends.values():
            for orphan in backend.list_orphans():
                log.warning(
                    "removing orphan sandbox %s (%s)", orphan.sandbox_id, orphan.description
                )
                backend.remove_orphan(orphan)
                self.orphans_removed += 1

    # state -----------------------------------------------------------------

    def _notify(self) -> None:
        """Wake everyone waiting for a change (lease waiters, progress displays)."""
        self.metrics.observe_states(self.sandboxes.values(), self.spec.kinds)
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed(self, timeout: float) -> None:
        """Wait until the next state change or ``timeout``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    def _set_state(self, sb: Sandbox, state: SandboxState) -> None:
        if sb.state is not state:
            log.info("%s: %s -> %s", sb.sandbox_id, sb.state.value, state.value)
            sb.state = state
            self._notify()

    def all_healthy(self) -> bool:
        return all(
            sb.state in (SandboxState.HEALTHY, SandboxState.LEASED)
            for sb in self.sandboxes.values()
        )

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _backend(self, sb: Sandbox) -> Backend:
        return self._backends[sb.group.backend]

    # supervision -----------------------------------------------------------

    async def _supervise(self, sb: Sandbox) -> None:
        while not self._stopping:
            sb.incarnation += 1
            request = SandboxRequest(sb.sandbox_id, sb.incarnation, sb.group)
            try:
                handle = await self._backend(sb).start(request)
            except SandboxStartError as e:
                sb.start_failures += 1
                sb.last_error = str(e)
                log.warning("%s", e)
                self._metric_restart(sb, "start_failed")
                if await self._backoff(sb):
                    break
                continue
            except Exception as e:  # a backend bug must not kill the supervisor
                sb.start_failures += 1
                sb.last_error = f"backend error: {e!r}"
                log.exception("starting %s", sb.sandbox_id)
                if await self._backoff(sb):
                    break
                continue
            sb.handle = handle
            sb.start_failures = 0
            sb.health_failures = 0
            sb.health = "-"
            if self._stopping:
                break
            reason, detail = await self._watch(sb)  # healthy after its first good check
            await self._retire(sb, reason, detail)
            if self._stopping:
                break
            if reason != "reset" and await self._backoff(sb):
                break
        if sb.handle is not None:
            await self._stop_handle(sb)
        self._set_state(sb, SandboxState.STOPPED)

    def _became_healthy(self, sb: Sandbox) -> None:
        now = time.monotonic()
        sb.healthy_since = now
        if sb.recovering == "reset":
            self.metrics.reset_time.labels(sb.kind).observe(now - sb.reset_requested_at)
        elif sb.recovering == "replace":
            self.metrics.replace_time.labels(sb.kind).observe(now - sb.reset_requested_at)
        sb.recovering = None
        self._set_state(sb, SandboxState.LEASED if sb.lease else SandboxState.HEALTHY)

    async def _watch(self, sb: Sandbox) -> tuple[str, str]:
        """Until the incarnation must go: returns (reason, detail)."""
        assert sb.handle is not None
        backend = self._backend(sb)
        opts = self.spec.health
        next_check = time.monotonic()  # a first check right away
        while True:
            if self._stopping:
                return "stop", "farm down"
            if sb.reset_reason is not None:
                return "reset", sb.reset_reason
            ended = backend.exit_reason(sb.handle)
            if ended is not None:
                return "died", ended
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + opts.interval_s
                ok, problem = await self._check(sb, backend)
                if problem is not None:
                    return "unhealthy", problem
                if ok and sb.healthy_since is None:
                    self._became_healthy(sb)
                stable = sb.healthy_since is not None
                if stable and time.monotonic() - sb.healthy_since >= self.spec.restart.stable_s:
                    sb.consecutive = 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sb.wake.wait(), POLL_S)
            sb.wake.clear()

    async def _check(self, sb: Sandbox, backend: Backend) -> tuple[bool, str | None]:
        """One health and limit check: (passed, a reason to replace the sandbox or None)."""
        assert sb.handle is not None
        try:
            resp = await health_rpc(sb.handle.endpoint, timeout=self.spec.health.timeout_s)
            ok = resp.status == resp.STATUS_SERVING
            sb.health = (
                f"serving, {resp.active_sessions} session{'s' * (resp.active_sessions != 1)}"
                if ok
                else "draining"
            )
            problem = None if ok else "health: draining"
        except FarmError as e:
            ok, problem = False, f"health check failed: {e}"
        if ok:
            sb.health_failures = 0
        else:
            sb.health_failures += 1
            sb.health = f"failing ({sb.health_failures}/{self.spec.health.failures})"
            if backend.exit_reason(sb.handle) is not None:  # died during the check
                return False, None
            if sb.health_failures >= self.spec.health.failures:
                return False, problem
            return False, None
        lim = sb.group.limits
        if lim.memory_mb is not None or lim.pids is not None:
            use = backend.usage(sb.handle)
            if lim.memory_mb and use.memory_mb is not None and use.memory_mb > lim.memory_mb:
                return True, f"over its memory limit ({use.memory_mb:.0f} MB > {lim.memory_mb} MB)"
            if lim.pids and use.pids is not None and use.pids > lim.pids:
                return True, f"over its pids limit ({use.pids} > {lim.pids})"
        return True, None

    async def _retire(self, sb: Sandbox, reason: str, detail: str) -> None:
        """End the incarnation: end its lease if it died, stop it, count it."""
        now = time.monotonic()
        if reason in ("died", "unhealthy"):
            message = (
                f"sandbox {sb.sandbox_id} died ({detail})"
                if reason == "died"
                else f"sandbox {sb.sandbox_id} was replaced: {detail}"
            )
            sb.last_error = message
            log.warning("%s", message)
            self._set_state(sb, SandboxState.UNHEALTHY)
            if sb.lease is not None:
                self._end_lease(
                    sb.lease,
                    f"{message}; your episode was truncated for infrastructure reasons; "
                    "lease another sandbox",
                )
            sb.restarts += 1
            if (
                sb.healthy_since is not None
                and now - sb.healthy_since >= self.spec.restart.stable_s
            ):
                sb.consecutive = 0
            sb.consecutive += 1
            sb.reset_requested_at = now
            sb.recovering = "replace"
            self._metric_restart(sb, reason)
        elif reason == "reset":
            sb.resets += 1
            sb.recovering = "reset"
            self._set_state(sb, SandboxState.RESTARTING)
        sb.reset_reason = None  # whatever ended it, the next incarnation starts clean
        sb.healthy_since = None
        await self._stop_handle(sb, HUNG_GRACE_S if reason == "unhealthy" else STOP_GRACE_S)
        if reason != "stop":
            self._set_state(sb, SandboxState.RESTARTING)

    async def _stop_handle(self, sb: Sandbox, grace_s: float = STOP_GRACE_S) -> None:
        handle, sb.handle = sb.handle, None
        if handle is None:
            return
        try:
            await self._backend(sb).stop(handle, grace_s)
        except Exception:
            log.exception("stopping %s", sb.sandbox_id)
        if self._stopping and sb.lease is not None:
            self._end_lease(sb.lease, f"the farm shut down; sandbox {sb.sandbox_id} stopped")

    async def _backoff(self, sb: Sandbox) -> bool:
        """Sleep the restart backoff; True if the farm is stopping."""
        if sb.start_failures:
            sb.consecutive += 1
        delay = restart_delay(sb.consecutive, self.spec.restart)
        self._set_state(sb, SandboxState.RESTARTING)
        if delay > 0:
            log.info(
                "%s: restarting in %.1f s (restart %d in a row)",
                sb.sandbox_id,
                delay,
                sb.consecutive,
            )
            deadline = time.monotonic() + delay
            while not self._stopping and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(sb.wake.wait(), deadline - time.monotonic())
                sb.wake.clear()
        return self._stopping

    def _metric_restart(self, sb: Sandbox, reason: str) -> None:
        self.metrics.restarts.labels(sb.kind, reason).inc()

    # leases ----------------------------------------------------------------

    def _end_lease(self, lease: Lease, why: str) -> None:
        self.leases.pop(lease.lease_id, None)
        sb = self.sandboxes.get(lease.sandbox_id)
        if sb is not None and sb.lease is lease:
            sb.lease = None
            if sb.state is SandboxState.LEASED:
                self._set_state(sb, SandboxState.HEALTHY)
        self._ended[lease.lease_id] = why
        while len(self._ended) > ENDED_LEASES_KEPT:
            self._ended.popitem(last=False)
        self._notify()

    def _reset(self, sb: Sandbox, why: str) -> None:
        """Restart ``sb`` before it goes back to the pool."""
        if sb.state in (SandboxState.HEALTHY, SandboxState.LEASED) and sb.reset_reason is None:
            sb.reset_reason = why
            sb.reset_requested_at = time.monotonic()
            sb.wake.set()

    async def lease(
        self, selector: str, ttl_s: float = 0.0, wait_timeout_s: float = 0.0, holder: str = ""
    ) -> tuple[Lease, Sandbox]:
        """Lease a free healthy sandbox matching ``selector`` (kind, group or env id)."""
        t0 = time.monotonic()
        matching = [sb for sb in self.sandboxes.values() if sb.matches(selector)]
        if not matching:
            have = ", ".join(
                f"{g.kind} ({g.count} x {g.env}, group {g.group})" for g in self.spec.sandboxes
            )
            self.metrics.lease_failures.labels(selector[:32], "no_such_kind").inc()
            raise NoSuchKindError(
                f"this farm has no sandboxes of kind {selector!r}; it has: {have or 'none'}"
            )
        kind = matching[0].kind
        ttl = ttl_s if ttl_s > 0 else self.spec.control.lease_ttl_s
        wait = min(max(wait_timeout_s, 0.0), self.spec.control.max_lease_wait_s)
        deadline = t0 + wait
        while True:
            if self._stopping:
                raise ShuttingDownError("the farm is shutting down")
            free = [sb for sb in matching if sb.free]
            if free:
                sb = min(free, key=lambda s: s.leases_total)
                lease = Lease(uuid.uuid4().hex, sb.sandbox_id, holder, ttl)
                sb.lease = lease
                sb.leases_total += 1
                self.leases[lease.lease_id] = lease
                self._set_state(sb, SandboxState.LEASED)
                self.metrics.lease_latency.labels(kind).observe(time.monotonic() - t0)
                return lease, sb
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                counts: dict[str, int] = {}
                for sb in matching:
                    counts[sb.state.value] = counts.get(sb.state.value, 0) + 1
                states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                self.metrics.lease_failures.labels(kind, "timeout").inc()
                raise LeaseTimeoutError(
                    f"no {selector!r} sandbox became free within {wait:g} s "
                    f"({len(matching)} in the farm: {states})"
                )
            await self.changed(remaining)

    def heartbeat(self, lease_id: str) -> float:
        """Extend a lease by its ttl; returns the seconds until it expires."""
        lease = self.leases.get(lease_id)
        if lease is None:
            self._raise_ended(lease_id)
        assert lease is not None
        return lease.beat()

    def release(self, lease_id: str, reset: bool = False) -> tuple[bool, str]:
        """End a lease; returns (already_ended, message). ``reset`` restarts the sandbox."""
        lease = self.leases.get(lease_id)
        if lease is None:
            if lease_id in self._ended:
                return True, self._ended[lease_id]
            raise UnknownLeaseError(f"unknown lease {lease_id!r}")
        sb = self.sandboxes[lease.sandbox_id]
        self._end_lease(lease, f"lease {lease_id} was released")
        if reset:
            self._reset(sb, f"released with reset by {lease.holder or 'its holder'}")
        return False, "released"

    def _raise_ended(self, lease_id: str) -> None:
        why = self._ended.get(lease_id)
        if why is None:
            raise UnknownLeaseError(f"unknown lease {lease_id!r}")
        raise LeaseLostError(why)

    async def _reap_leases(self) -> None:
        """Expire leases ``ttl_s`` after their last heartbeat; reset their sandboxes."""
        while not self._stopping:
            now = time.monotonic()
            for lease in [le for le in self.leases.values() if le.expires_at < now]:
                sb = self.sandboxes[lease.sandbox_id]
                why = (
                    f"lease {lease.lease_id} expired (no heartbeat for {lease.ttl_s:g} s); "
                    f"sandbox {sb.sandbox_id} was reset"
                )
                log.warning("%s", why)
                self._end_lease(lease, why)
                self._reset(sb, "lease expired")
            await asyncio.sleep(REAP_S)

    # views -----------------------------------------------------------------

    def uptime(self, sb: Sandbox) -> float:
        return time.monotonic() - sb.healthy_since if sb.healthy_since is not None else 0.0
