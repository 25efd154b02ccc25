"""The ``farm.v1.Environment`` service on grpc.aio: sessions, describe, health.

Messages are (de)serialized here rather than by grpc, so that a malformed
message is answered with INVALID_ARGUMENT naming the problem instead of an
opaque INTERNAL. Sessions idle for longer than ``idle_timeout_s`` (no request
and no step in progress) are reaped: their stream ends with DEADLINE_EXCEEDED
and their env is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from farm import __version__, codec
from farm.env import EnvRunner, Executor
from farm.proto import farm_pb2 as pb
from farm.protocol import SUPPORTED_VERSIONS, negotiate
from farm.server.session import Session

log = logging.getLogger("farm.server")

SERVICE_NAME = "farm.v1.Environment"


def env_spec(env_id: str, env: Any) -> pb.EnvSpec:
    spec = pb.EnvSpec(env_id=env_id)
    spec.observation_space.CopyFrom(codec.space_to_proto(env.observation_space))
    spec.action_space.CopyFrom(codec.space_to_proto(env.action_space))
    spec.metadata_json = codec.encode_info(dict(getattr(env, "metadata", None) or {}))
    return spec


class EnvironmentService:
    """Serves one environment factory; one env instance per session."""

    def __init__(
        self,
        factory: Callable[[], Any],
        env_id: str,
        *,
        max_sessions: int,
        idle_timeout_s: float,
        executor: Executor,
        token: str | None,
    ) -> None:
        self._factory = factory
        self.env_id = env_id
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self._executor = executor
        self._token = token
        self.sessions: dict[str, Session] = {}
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._opening = 0
        self._closing: set[asyncio.Task[None]] = set()
        self._spec: pb.EnvSpec | None = None
        self._spec_lock = asyncio.Lock()
        self.total_sessions = 0
        self.reaped_sessions = 0
        self.draining = False
        self.started = time.monotonic()

    # ------------------------------------------------------------ plumbing

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Session": grpc.stream_stream_rpc_method_handler(self.session),
                "Describe": grpc.unary_unary_rpc_method_handler(self.describe),
                "Health": grpc.unary_unary_rpc_method_handler(self.health),
            },
        )

    async def _check_auth(self, context: grpc.aio.ServicerContext) -> None:
        if self._token is None:
            return
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str):
                scheme, _, token = value.partition(" ")
                if scheme.lower() == "bearer" and hmac.compare_digest(token, self._token):
                    return
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            "missing or wrong token: send metadata 'authorization: Bearer <token>'",
        )

    # ------------------------------------------------------------ unary

    async def describe(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await self._check_auth(context)
        try:
            spec = await self._describe_env()
        except Exception as e:  # noqa: BLE001
            await context.abort(
                grpc.StatusCode.INTERNAL, f"could not create env {self.env_id!r}: {e}"
            )
        resp = pb.DescribeResponse(server_version=__version__, env=spec)
        resp.protocol_versions.extend(SUPPORTED_VERSIONS)
        return resp.SerializeToString()

    async def _describe_env(self) -> pb.EnvSpec:
        async with self._spec_lock:
            if self._spec is None:
                runner = await EnvRunner.create(self._factory, self._executor)
                try:
                    self._spec = env_spec(self.env_id, runner.env)
                finally:
                    await runner.close()
            return self._spec

    async def health(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await self._check_auth(context)
        resp = pb.HealthResponse(
            status=pb.HealthResponse.STATUS_DRAINING
            if self.draining
            else pb.HealthResponse.STATUS_SERVING,
            env_id=self.env_id,
            server_version=__version__,
            active_sessions=len(self.sessions),
            max_sessions=self.max_sessions,
            total_sessions=self.total_sessions,
            reaped_sessions=self.reaped_sessions,
            uptime_s=time.monotonic() - self.started,
        )
        return resp.SerializeToString()

    # ------------------------------------------------------------ sessions

    async def session(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        await self._check_auth(context)
        if self.draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "server is shutting down")
        first = await context.read()
        if first is grpc.aio.EOF:
            return
        try:
            req = pb.SessionRequest.FromString(first)
        except DecodeError as e:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"malformed first SessionRequest: {e}"
            )
        if req.WhichOneof("request") != "open":
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "the first request of a session must be `open` (protocol negotiation)",
            )
        opened = req.open
        version = negotiate(opened.protocol_versions)
        if version is None:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"protocol version mismatch: client speaks {list(opened.protocol_versions)}, "
                f"server speaks {list(SUPPORTED_VERSIONS)}",
            )
        if len(self.sessions) + self._opening >= self.max_sessions:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"server is at its limit of {self.max_sessions} sessions",
            )
        self._opening += 1
        try:
            runner = await EnvRunner.create(self._factory, self._executor)
        except Exception as e:
            log.exception("creating env %s failed", self.env_id)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"could not create env {self.env_id!r}: {type(e).__name__}: {e}",
            )
        finally:
            self._opening -= 1
        session = Session(uuid.uuid4().hex, runner, opened.image_encoding, opened.jpeg_quality)
        self._register(session)
        try:
            resp = pb.SessionResponse()
            resp.opened.protocol_version = version
            resp.opened.session_id = session.session_id
            resp.opened.env.CopyFrom(env_spec(self.env_id, runner.env))
            await context.write(resp.SerializeToString())
            read, write, handle = context.read, context.write, session.handle
            while True:
                data = await read()
                if data is grpc.aio.EOF:
                    break
                await write(await handle(data))
                if session.closed:
                    break
                if self.draining:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "server is shutting down")
        except asyncio.CancelledError:
            if session.reaped:
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"session {session.session_id} was idle for more than "
                    f"{self.idle_timeout_s:g} s and has been reaped",
                )
            if self.draining:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "server is shutting down")
            raise
        finally:
            self._unregister(session)

    def _register(self, session: Session) -> None:
        self.sessions[session.session_id] = session
        task = asyncio.current_task()
        assert task is not None
        self._tasks[session.session_id] = task
        self.total_sessions += 1

    def _unregister(self, session: Session) -> None:
        self.sessions.pop(session.session_id, None)
        self._tasks.pop(session.session_id, None)
        task = asyncio.get_running_loop().create_task(session.runner.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def reap_idle(self) -> int:
        """Cancel every session idle for longer than the timeout; returns how many."""
        now = time.monotonic()
        reaped = 0
        for sid, session in list(self.sessions.items()):
            if not session.busy and now - session.last_active > self.idle_timeout_s:
                session.reaped = True
                task = self._tasks.get(sid)
                if task is not None:
                    task.cancel()
                reaped += 1
        self.reaped_sessions += reaped
        return reaped

    async def reap_forever(self) -> None:
        period = max(0.05, min(self.idle_timeout_s / 4, 5.0))
        while True:
            await asyncio.sleep(period)
            n = await self.reap_idle()
            if n:
                log.info("reaped %d idle session(s)", n)

    def drain(self) -> None:
        """Refuse new sessions and end every session that is not mid-request.

        Sessions with a request in flight end (UNAVAILABLE) after answering it.
        """
        self.draining = True
        for sid, session in list(self.sessions.items()):
            task = self._tasks.get(sid)
            if not session.busy and task is not None:
                task.cancel()

    async def close_all(self) -> None:
        """Cancel remaining sessions and wait until every env is closed."""
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.sleep(0)
        if self._closing:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._closing, return_exceptions=True)
