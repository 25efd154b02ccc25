"""The control service (``farm.control.v1.Control``) over a :class:`Controller`."""

from __future__ import annotations

import os
from typing import Any

import grpc

from farm.errors import RemoteError
from farm.proto import control_pb2 as pb
from farm.proto import control_pb2_grpc
from orchestration.controller import Controller, ShuttingDownError
from orchestration.state import Sandbox


def sandbox_status(controller: Controller, sb: Sandbox) -> pb.SandboxStatus:
    return pb.SandboxStatus(
        id=sb.sandbox_id,
        group=sb.group.group,
        kind=sb.kind,
        env=sb.env,
        backend=sb.group.backend,
        endpoint=sb.endpoint,
        state=sb.state.value,
        health=sb.health,
        lease_id=sb.lease.lease_id if sb.lease else "",
        holder=sb.lease.holder if sb.lease else "",
        leases_total=sb.leases_total,
        restarts=sb.restarts,
        resets=sb.resets,
        start_failures=sb.start_failures,
        uptime_s=controller.uptime(sb),
        pid=(sb.handle.pid or 0) if sb.handle else 0,
        last_error=sb.last_error,
        incarnation=sb.incarnation,
    )


def status_response(controller: Controller) -> pb.StatusResponse:
    import time

    return pb.StatusResponse(
        sandboxes=[sandbox_status(controller, sb) for sb in controller.sandboxes.values()],
        control_address=controller.address,
        metrics_address=controller.metrics.address,
        pid=os.getpid(),
        uptime_s=time.monotonic() - controller.started_at,
        state_dir=str(controller.state_dir),
        spec_path=controller.spec_path,
        shutting_down=controller.stopping,
    )


class ControlService(control_pb2_grpc.ControlServicer):
    """Each RPC maps onto one :class:`Controller` method; errors become statuses."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller

    async def _abort(self, context: Any, err: Exception) -> None:
        if isinstance(err, ShuttingDownError):
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        assert isinstance(err, RemoteError)
        await context.abort(err.code, str(err.args[0]))

    async def Lease(self, request: pb.LeaseRequest, context: Any) -> pb.LeaseResponse:
        try:
            lease, sb = await self.c.lease(
                request.kind, request.ttl_s, request.wait_timeout_s, request.holder
            )
        except (RemoteError, ShuttingDownError) as e:
            await self._abort(context, e)
            raise AssertionError("unreachable") from e
        return pb.LeaseResponse(
            lease_id=lease.lease_id,
            sandbox_id=sb.sandbox_id,
            endpoint=sb.endpoint,
            kind=sb.kind,
            env=sb.env,
            group=sb.group.group,
            ttl_s=lease.ttl_s,
        )

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        try:
            return pb.HeartbeatResponse(expires_in_s=self.c.heartbeat(request.lease_id))
        except RemoteError as e:
            await self._abort(context, e)
            raise AssertionError("unreachable") from e

    async def Release(self, request: pb.ReleaseRequest, context: Any) -> pb.ReleaseResponse:
        try:
            ended, message = self.c.release(request.lease_id, request.reset)
        except RemoteError as e:
            await self._abort(context, e)
            raise AssertionError("unreachable") from e
        return pb.ReleaseResponse(already_ended=ended, message=message)

    async def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusResponse:
        return status_response(self.c)

    async def Shutdown(self, request: pb.ShutdownRequest, context: Any) -> pb.ShutdownResponse:
        self.c.request_shutdown()
        return pb.ShutdownResponse()
