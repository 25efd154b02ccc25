"""The low-level async session: one stream, pipelined requests, in-order responses.

Send any number of requests with :meth:`AsyncSession.send_reset` /
:meth:`send_step`, then :meth:`recv` their results in the same order::

    s = await AsyncSession.open("unix:///tmp/env.sock")
    await s.send_reset(seed=0)
    for a in actions:
        await s.send_step(a)          # pipelined: no wait for the reply
    obs, info = await s.recv()
    results = [await s.recv() for _ in actions]

A session is used by one task at a time (one sender/receiver pair at most).
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import Any

import grpc

from farm import codec, wire
from farm.address import Address
from farm.errors import (
    FarmError,
    ProtocolError,
    SandboxUnavailableError,
    from_rpc_error,
    from_status,
    status_code,
)
from farm.fastwire import plan_for
from farm.proto import farm_pb2 as pb
from farm.protocol import SUPPORTED_VERSIONS

SESSION_METHOD = "/farm.v1.Environment/Session"
DESCRIBE_METHOD = "/farm.v1.Environment/Describe"
HEALTH_METHOD = "/farm.v1.Environment/Health"

_ENCODINGS = {
    "raw": pb.IMAGE_ENCODING_RAW,
    "png": pb.IMAGE_ENCODING_PNG,
    "jpeg": pb.IMAGE_ENCODING_JPEG,
}

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.enable_retries", 0),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
]


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    return (("authorization", f"Bearer {token}"),) if token else None


async def open_channel(address: str, timeout: float) -> grpc.aio.Channel:
    """A ready aio channel to ``address``; SandboxUnavailableError if none answers."""
    addr = Address.parse(address)
    if addr.is_unix and not os.path.exists(addr.unix_path or ""):
        raise SandboxUnavailableError(f"no farm server at {address}: socket file does not exist")
    channel = grpc.aio.insecure_channel(addr.grpc_target(), options=CHANNEL_OPTIONS)
    try:
        await asyncio.wait_for(channel.channel_ready(), timeout)
    except (TimeoutError, grpc.RpcError) as e:
        await channel.close()
        raise SandboxUnavailableError(
            f"no farm server answered at {address} within {timeout:g} s"
        ) from e
    return channel


async def _ended_status(call: Any, timeout: float) -> tuple[grpc.StatusCode, str] | None:
    """The status ``call`` ended with, if it ends with one other than OK within ``timeout``."""
    try:
        code = await asyncio.wait_for(call.code(), timeout)
        details = await call.details()
    except (TimeoutError, grpc.RpcError, asyncio.InvalidStateError):
        return None
    return None if code == grpc.StatusCode.OK else (code, details)


def _raise_error(resp: pb.SessionResponse) -> None:
    raise from_status(status_code(resp.error.code), resp.error.message)


class AsyncSession:
    """One open session on a farm server (see module doc)."""

    def __init__(self, channel: grpc.aio.Channel, call: Any, opened: pb.OpenResponse, address: str):
        self._channel = channel
        self._call = call
        self.address = address
        self.session_id = opened.session_id
        self.protocol_version = opened.protocol_version
        self.env_id = opened.env.env_id
        self.observation_space = codec.space_from_proto(opened.env.observation_space)
        self.action_space = codec.space_from_proto(opened.env.action_space)
        self._action = plan_for(self.action_space)
        self._obs = plan_for(self.observation_space)
        self.metadata = codec.decode_info(opened.env.metadata_json)
        self._pending: deque[str] = deque()
        self.closed = False

    @classmethod
    async def open(
        cls,
        address: str,
        *,
        token: str | None = None,
        image_encoding: str = "raw",
        jpeg_quality: int = 0,
        timeout: float = 10.0,
        protocol_versions: tuple[str, ...] = SUPPORTED_VERSIONS,
        client_name: str = "farm-python",
    ) -> AsyncSession:
        if image_encoding not in _ENCODINGS:
            raise FarmError(
                f"image_encoding must be one of {sorted(_ENCODINGS)}, got {image_encoding!r}"
            )
        channel = await open_channel(address, timeout)
        try:
            call = channel.stream_stream(SESSION_METHOD)(metadata=auth_metadata(token))
            req = pb.SessionRequest()
            req.open.protocol_versions.extend(protocol_versions)
            req.open.image_encoding = _ENCODINGS[image_encoding]
            req.open.jpeg_quality = jpeg_quality
            req.open.client_name = client_name
            try:
                await call.write(req.SerializeToString())
            except (grpc.RpcError, asyncio.InvalidStateError):
                # the server may end the call at once (token, draining, session limit); a
                # write racing that status fails with INTERNAL or "RPC already finished":
                # report the status the server sent, not the write's failure
                ended = await _ended_status(call, min(timeout, 5.0))
                if ended is None:
                    raise
                raise from_status(*ended) from None
            data = await asyncio.wait_for(call.read(), timeout)
            if data is grpc.aio.EOF:
                raise from_status(await call.code(), await call.details())
            resp = pb.SessionResponse.FromString(data)
            if resp.HasField("error"):
                _raise_error(resp)
            if resp.WhichOneof("response") != "opened":
                raise ProtocolError("server did not answer `open` with `opened`")
            return cls(channel, call, resp.opened, address)
        except grpc.RpcError as e:
            await channel.close()
            raise from_rpc_error(e) from None
        except asyncio.InvalidStateError:  # finished before `open` was sent, with no status
            await channel.close()
            raise SandboxUnavailableError(
                f"the farm server at {address} ended the session before it opened"
            ) from None
        except TimeoutError:
            await channel.close()
            raise SandboxUnavailableError(
                f"farm server at {address} did not open a session within {timeout:g} s"
            ) from None
        except BaseException:
            await channel.close()
            raise

    # ------------------------------------------------------------ pipelined API

    async def _send(self, req: pb.SessionRequest | bytes, kind: str) -> None:
        if self.closed:
            raise SandboxUnavailableError(f"session {self.session_id} is closed")
        data = req if isinstance(req, bytes) else req.SerializeToString()
        try:
            await self._call.write(data)
        except grpc.RpcError as e:
            self.closed = True
            if e.code() == grpc.StatusCode.INTERNAL:
                # gRPC core failed the write ("Internal error from Core"): the stream broke
                # (server killed or gone) before its status arrived; the session is lost.
                raise SandboxUnavailableError(
                    f"session {self.session_id} has ended: the stream broke while sending "
                    f"({e.details()})"
                ) from None
            raise from_rpc_error(e) from None
        except asyncio.InvalidStateError as e:  # the stream already finished
            self.closed = True
            code = await self._call.code() if self._call.done() else grpc.StatusCode.OK
            if code != grpc.StatusCode.OK:  # say why it ended (e.g. reaped: DEADLINE_EXCEEDED)
                details = await self._call.details()
                raise from_status(code, f"session {self.session_id} has ended: {details}") from None
            raise SandboxUnavailableError(f"session {self.session_id} has ended: {e}") from None
        self._pending.append(kind)

    async def send_reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> None:
        req = pb.SessionRequest()
        r = req.reset
        r.SetInParent()
        if seed is not None:
            r.seed = int(seed)
        if options:
            r.options_json = codec.encode_info(options)
        await self._send(req, "reset")

    async def send_step(self, action: Any) -> None:
        await self._send(wire.build_step_request(self._action.encode, action), "step")

    @property
    def pending(self) -> int:
        """Requests sent whose response has not been received yet."""
        return len(self._pending)

    async def recv(self) -> Any:
        """The result of the oldest pending request (raises its error, if it failed)."""
        if not self._pending:
            raise FarmError("recv() with no request pending")
        kind = self._pending.popleft()
        try:
            data = await self._call.read()
        except grpc.RpcError as e:
            self.closed = True
            raise from_rpc_error(e) from None
        if data is grpc.aio.EOF:
            self.closed = True
            code = await self._call.code()
            details = await self._call.details()
            if code == grpc.StatusCode.OK:
                code, details = grpc.StatusCode.UNAVAILABLE, "server ended the session"
            raise from_status(code, details)
        rkind, payload = wire.read_response(data)
        if rkind == wire.R_ERROR:
            raise from_status(status_code(payload[0]), payload[1])
        decode = self._obs.decode
        if kind == "step" and rkind == wire.R_STEP:
            obs, reward, terminated, truncated, info = None, 0.0, False, False, b""
            for field, _, val in payload:
                if field == 1:
                    obs = decode(data, *val)
                elif field == 2:
                    reward = wire.read_double(data, val)
                elif field == 3:
                    terminated = bool(val)
                elif field == 4:
                    truncated = bool(val)
                elif field == 5:
                    info = data[val[0] : val[1]]
            if obs is None:
                raise ProtocolError("step response without an observation")
            return obs, reward, terminated, truncated, codec.decode_info(info)
        if kind == "reset" and rkind == wire.R_RESET:
            obs, info = None, b""
            for field, _, val in payload:
                if field == 1:
                    obs = decode(data, *val)
                elif field == 2:
                    info = data[val[0] : val[1]]
            if obs is None:
                raise ProtocolError("reset response without an observation")
            return obs, codec.decode_info(info)
        raise ProtocolError(f"expected a {kind} response, got response field {rkind}")

    # ------------------------------------------------------------ request/response

    async def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        await self.send_reset(seed, options)
        return await self.recv()

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        await self.send_step(action)
        return await self.recv()

    async def close(self) -> None:
        """End the session (the server closes the env) and the channel. Idempotent."""
        if not self.closed:
            self.closed = True
            try:
                while self._pending:  # drain what was pipelined
                    self._pending.popleft()
                    await self._call.read()
                await self._call.done_writing()
                await asyncio.wait_for(self._call.code(), 5.0)
            except (TimeoutError, grpc.RpcError, asyncio.InvalidStateError):
                pass
        await self._channel.close()


async def describe(
    address: str, *, token: str | None = None, timeout: float = 10.0
) -> pb.DescribeResponse:
    """The server's DescribeResponse (spaces, metadata, protocol versions)."""
    return await _unary(
        address, DESCRIBE_METHOD, pb.DescribeRequest(), pb.DescribeResponse, token, timeout
    )


async def health(
    address: str, *, token: str | None = None, timeout: float = 5.0
) -> pb.HealthResponse:
    """The server's HealthResponse (status, sessions, uptime)."""
    return await _unary(
        address, HEALTH_METHOD, pb.HealthRequest(), pb.HealthResponse, token, timeout
    )


async def _unary(
    address: str, method: str, req: Any, resp_type: Any, token: str | None, timeout: float
) -> Any:
    channel = await open_channel(address, timeout)
    try:
        data = await channel.unary_unary(method)(
            req.SerializeToString(), metadata=auth_metadata(token), timeout=timeout
        )
        return resp_type.FromString(data)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None
    finally:
        await channel.close()
