"""Jobs lease sandboxes from a farm's controller.

>>> client = FarmClient()                         # the default control address
>>> with client.lease("toy") as lease:            # heartbeats in the background
...     env = farm.connect(lease.endpoint)
...     ...                                       # released on exit

In asyncio code::

    async with AsyncFarmClient() as client:
        async with await client.lease("browser") as lease:
            env = await farm.aconnect(lease.endpoint)

A lease heartbeats every ``ttl_s / 3``. When the controller says the lease
ended under its holder (its sandbox died, or it expired), ``lease.lost`` holds
the reason and :meth:`Lease.check` raises :class:`LeaseLostError`; the env
client has then already reported the episode truncated (``farm.truncated_reason``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from typing import Any

import grpc

from farm.address import Address
from farm.errors import FarmError
from farm.proto import control_pb2 as pb
from farm.proto import control_pb2_grpc
from orchestration.errors import (
    FarmNotRunningError,
    LeaseLostError,
    NoSuchKindError,
    UnknownLeaseError,
    control_error,
)
from orchestration.spec import default_control_address, resolve_state_dir

log = logging.getLogger("farm.client.lease")

_RPC_TIMEOUT_S = 10.0


def default_address() -> str:
    """The control address of a farm started with the default state dir."""
    return default_control_address(resolve_state_dir())


def _target(address: str) -> str:
    addr = Address.parse(address)
    if addr.is_unix and not os.path.exists(addr.unix_path or ""):
        raise FarmNotRunningError(
            f"no farm is running at {address} (no socket file); start one with `farm up`"
        )
    return addr.grpc_target()


class _LeaseInfo:
    def __init__(self, resp: pb.LeaseResponse) -> None:
        self.lease_id = resp.lease_id
        self.sandbox_id = resp.sandbox_id
        self.endpoint = resp.endpoint
        self.kind = resp.kind
        self.env = resp.env
        self.group = resp.group
        self.ttl_s = resp.ttl_s
        self.lost: str | None = None
        self.released = False

    @property
    def heartbeat_interval_s(self) -> float:
        return max(0.05, self.ttl_s / 3)

    def check(self) -> None:
        """Raise :class:`LeaseLostError` if the lease ended under its holder."""
        if self.lost is not None:
            raise LeaseLostError(self.lost)

    def __repr__(self) -> str:
        state = "lost" if self.lost else ("released" if self.released else "held")
        return f"<{type(self).__name__} {self.sandbox_id} {self.endpoint} {state}>"


class Lease(_LeaseInfo):
    """A held sandbox (sync); a daemon thread heartbeats until :meth:`release`."""

    def __init__(self, client: FarmClient, resp: pb.LeaseResponse, heartbeat: bool = True) -> None:
        super().__init__(resp)
        self._client = client
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, daemon=True, name=f"farm-lease-{resp.sandbox_id}"
        )
        if heartbeat:
            self._thread.start()

    def _beat(self) -> None:
        last_ok = time.monotonic()
        while not self._stop.wait(self.heartbeat_interval_s):
            try:
                self._client.heartbeat(self.lease_id)
                last_ok = time.monotonic()
            except (LeaseLostError, UnknownLeaseError) as e:
                self.lost = str(e.args[0])
                return
            except FarmNotRunningError as e:
                if time.monotonic() - last_ok > self.ttl_s:
                    self.lost = f"the farm controller is unreachable: {e}"
                    return
            except FarmError as e:  # keep beating through transient errors
                log.warning("heartbeat of lease %s failed: %s", self.lease_id, e)

    def release(self, reset: bool = False) -> None:
        """Give the sandbox back (``reset``: restart it first). Idempotent."""
        if self.released:
            return
        self.released = True
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(_RPC_TIMEOUT_S)
        try:
            self._client.release(self.lease_id, reset=reset)
        except (FarmNotRunningError, UnknownLeaseError) as e:
            log.warning("releasing lease %s: %s (it will expire)", self.lease_id, e)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class FarmClient:
    """A synchronous client of a farm's control service (thread-safe)."""

    def __init__(self, address: str | None = None, *, holder: str = "") -> None:
        self.address = address or default_address()
        self.holder = holder or f"pid {os.getpid()}"
        self._channel = grpc.insecure_channel(_target(self.address))
        self._stub = control_pb2_grpc.ControlStub(self._channel)

    def _call(
        self, method: str, req: Any, timeout: float, not_found: type = UnknownLeaseError
    ) -> Any:
        try:
            return getattr(self._stub, method)(req, timeout=timeout)
        except grpc.RpcError as e:
            raise control_error(e, not_found) from None

    def lease(
        self,
        kind: str,
        *,
        ttl_s: float = 0.0,
        wait_timeout_s: float = 60.0,
        heartbeat: bool = True,
    ) -> Lease:
        """A free healthy sandbox of ``kind`` (kind, group name or env id).

        ``ttl_s``: 0 for the farm's default; ``wait_timeout_s``: how long to wait for
        one to become free; ``heartbeat=False``: the caller heartbeats itself.
        """
        req = pb.LeaseRequest(
            kind=kind, ttl_s=ttl_s, wait_timeout_s=wait_timeout_s, holder=self.holder
        )
        resp = self._call("Lease", req, wait_timeout_s + _RPC_TIMEOUT_S, NoSuchKindError)
        return Lease(self, resp, heartbeat)

    def heartbeat(self, lease_id: str) -> float:
        return float(
            self._call(
                "Heartbeat", pb.HeartbeatRequest(lease_id=lease_id), _RPC_TIMEOUT_S
            ).expires_in_s
        )

    def release(self, lease_id: str, *, reset: bool = False) -> pb.ReleaseResponse:
        return self._call(
            "Release", pb.ReleaseRequest(lease_id=lease_id, reset=reset), _RPC_TIMEOUT_S
        )

    def status(self, timeout: float = _RPC_TIMEOUT_S) -> pb.StatusResponse:
        return self._call("Status", pb.StatusRequest(), timeout)

    def shutdown(self) -> None:
        self._call("Shutdown", pb.ShutdownRequest(), _RPC_TIMEOUT_S)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> FarmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncLease(_LeaseInfo):
    """A held sandbox (asyncio); a task heartbeats until :meth:`release`."""

    def __init__(self, client: AsyncFarmClient, resp: pb.LeaseResponse) -> None:
        super().__init__(resp)
        self._client = client
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(self.heartbeat_interval_s)
            try:
                await self._client.heartbeat(self.lease_id)
                last_ok = time.monotonic()
            except (LeaseLostError, UnknownLeaseError) as e:
                self.lost = str(e.args[0])
                return
            except FarmNotRunningError as e:
                if time.monotonic() - last_ok > self.ttl_s:
                    self.lost = f"the farm controller is unreachable: {e}"
                    return
            except FarmError as e:  # keep beating through transient errors
                log.warning("heartbeat of lease %s failed: %s", self.lease_id, e)

    async def release(self, reset: bool = False) -> None:
        if self.released:
            return
        self.released = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        try:
            await self._client.release(self.lease_id, reset=reset)
        except (FarmNotRunningError, UnknownLeaseError) as e:
            log.warning("releasing lease %s: %s (it will expire)", self.lease_id, e)

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()


class AsyncFarmClient:
    """The asyncio client of a farm's control service."""

    def __init__(self, address: str | None = None, *, holder: str = "") -> None:
        self.address = address or default_address()
        self.holder = holder or f"pid {os.getpid()}"
        self._channel = grpc.aio.insecure_channel(_target(self.address))
        self._stub = control_pb2_grpc.ControlStub(self._channel)

    async def _call(
        self, method: str, req: Any, timeout: float, not_found: type = UnknownLeaseError
    ) -> Any:
        try:
            return await getattr(self._stub, method)(req, timeout=timeout)
        except grpc.RpcError as e:
            raise control_error(e, not_found) from None

    async def lease(
        self, kind: str, *, ttl_s: float = 0.0, wait_timeout_s: float = 60.0
    ) -> AsyncLease:
        req = pb.LeaseRequest(
            kind=kind, ttl_s=ttl_s, wait_timeout_s=wait_timeout_s, holder=self.holder
        )
        resp = await self._call("Lease", req, wait_timeout_s + _RPC_TIMEOUT_S, NoSuchKindError)
        return AsyncLease(self, resp)

    async def heartbeat(self, lease_id: str) -> float:
        resp = await self._call("Heartbeat", pb.HeartbeatRequest(lease_id=lease_id), _RPC_TIMEOUT_S)
        return float(resp.expires_in_s)

    async def release(self, lease_id: str, *, reset: bool = False) -> pb.ReleaseResponse:
        return await self._call(
            "Release", pb.ReleaseRequest(lease_id=lease_id, reset=reset), _RPC_TIMEOUT_S
        )

    async def status(self, timeout: float = _RPC_TIMEOUT_S) -> pb.StatusResponse:
        return await self._call("Status", pb.StatusRequest(), timeout)

    async def shutdown(self) -> None:
        await self._call("Shutdown", pb.ShutdownRequest(), _RPC_TIMEOUT_S)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncFarmClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
