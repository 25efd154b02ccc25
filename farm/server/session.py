"""One session: an env instance and the state machine that guards it.

States: ``needs_reset`` (initially, after the episode ended, after the env
raised) and ``running``. Every request gets exactly one response; a request
that fails gets an ``error`` response and leaves the session usable.
"""

from __future__ import annotations

import time
from typing import Any

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from farm import codec, wire
from farm.env import EnvRunner
from farm.errors import EncodingError, RemoteError
from farm.fastwire import plan_for
from farm.proto import farm_pb2 as pb

_INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]
_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]


def error_response(code: int, message: str) -> bytes:
    resp = pb.SessionResponse()
    resp.error.code = code
    resp.error.message = message
    return resp.SerializeToString()


def _short(value: Any, limit: int = 120) -> str:
    text = np.array2string(value, threshold=8) if isinstance(value, np.ndarray) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _env_failure(what: str, e: Exception) -> tuple[int, str]:
    if isinstance(e, RemoteError):
        return e.code.value[0], f"{what}: {e.args[0]}"
    return _INTERNAL, f"{what} raised {type(e).__name__}: {e}"


class Session:
    """Turns serialized ``SessionRequest`` bytes into ``SessionResponse`` bytes."""

    def __init__(
        self,
        session_id: str,
        runner: EnvRunner,
        image_encoding: int = pb.IMAGE_ENCODING_RAW,
        jpeg_quality: int = 0,
    ) -> None:
        self.session_id = session_id
        self.runner = runner
        self.observation_space = runner.observation_space
        self.action_space = runner.action_space
        self._action = plan_for(self.action_space)
        self._obs = plan_for(self.observation_space)
        self.image_encoding = image_encoding
        self.jpeg_quality = jpeg_quality
        self.running = False
        self.end_reason = "no episode has started; call reset() first"
        self.closed = False
        self.busy = False
        self.reaped = False
        self.last_active = time.monotonic()
        self.steps = 0

    async def handle(self, data: bytes) -> bytes:
        self.busy = True
        try:
            try:
                kind, body = _parse_request(data)
            except EncodingError as e:
                return error_response(
                    _INVALID, f"malformed SessionRequest ({len(data)} bytes): {e}"
                )
            if kind == _STEP:
                return await self._step(data, body)
            if kind == _RESET:
                return await self._reset(data, body)
            if kind == _CLOSE:
                self.closed = True
                return _CLOSED_RESPONSE
            if kind == _OPEN:
                return error_response(_PRECONDITION, "this session is already open")
            return error_response(_INVALID, "SessionRequest has no request set")
        finally:
            self.busy = False
            self.last_active = time.monotonic()

    def _observation_bytes(self, response: bytes) -> bytes:
        """Re-encode the images of a serialized response, if the client asked for it."""
        if self.image_encoding == pb.IMAGE_ENCODING_RAW:
            return response
        from farm.images import encode_images_in_value

        msg = pb.SessionResponse.FromString(response)
        sub = msg.step if msg.HasField("step") else msg.reset
        encode_images_in_value(sub.observation, self.image_encoding, self.jpeg_quality)
        return msg.SerializeToString()

    async def _reset(self, data: bytes, body: tuple[int, int]) -> bytes:
        try:
            msg = pb.ResetRequest.FromString(data[body[0] : body[1]])
            options = codec.decode_info(msg.options_json) or None
        except (DecodeError, EncodingError) as e:
            return error_response(_INVALID, f"invalid reset request: {e}")
        seed = msg.seed if msg.HasField("seed") else None
        self.running = False
        self.end_reason = "the last reset() failed; call reset() again"
        try:
            obs, info = await self.runner.reset(seed, options)
        except Exception as e:  # noqa: BLE001 - the env's failure is reported, never fatal
            return error_response(*_env_failure("env.reset()", e))
        try:
            resp = wire.build_reset_response(self._obs.encode, obs, codec.encode_info(info))
            resp = self._observation_bytes(resp)
        except (EncodingError, TypeError, ValueError) as e:
            return error_response(
                _INTERNAL, f"env.reset() returned an observation/info that cannot be sent: {e}"
            )
        self.running = True
        self.steps = 0
        return resp

    async def _step(self, data: bytes, body: tuple[int, int]) -> bytes:
        if not self.running:
            return error_response(_PRECONDITION, f"step() refused: {self.end_reason}")
        try:
            action_range = _action_range(data, body)
            action = self._action.decode(data, *action_range)
        except EncodingError as e:
            return error_response(_INVALID, f"invalid action: {e}")
        if not self._action.contains(action):
            return error_response(
                _INVALID, f"action {_short(action)} is outside the action space {self.action_space}"
            )
        try:
            obs, reward, terminated, truncated, info = await self.runner.step(action)
        except Exception as e:  # noqa: BLE001
            self.running = False
            self.end_reason = "env.step() raised; call reset()"
            code, text = _env_failure("env.step()", e)
            return error_response(code, text + "; the episode is over, call reset()")
        self.steps += 1
        try:
            resp = wire.build_step_response(
                self._obs.encode,
                obs,
                float(reward),
                bool(terminated),
                bool(truncated),
                codec.encode_info(info),
            )
            resp = self._observation_bytes(resp)
        except (EncodingError, TypeError, ValueError) as e:
            self.running = False
            self.end_reason = "the env returned an invalid step; call reset()"
            return error_response(_INTERNAL, f"env.step() returned data that cannot be sent: {e}")
        if terminated or truncated:
            self.running = False
            self.end_reason = (
                f"the episode has ended ({'terminated' if terminated else 'truncated'} "
                f"after {self.steps} steps); call reset() to start a new one"
            )
        return resp


# SessionRequest fields (farm.proto)
_OPEN, _RESET, _STEP, _CLOSE = 1, 2, 3, 4
_STEP_KEY = (_STEP << 3) | 2  # SessionRequest.step, length-delimited
_ACTION_KEY = (1 << 3) | 2  # StepRequest.action, length-delimited
_CLOSED_RESPONSE = pb.SessionResponse(closed=pb.CloseResponse()).SerializeToString()


def _parse_request(data: bytes) -> tuple[int, tuple[int, int]]:
    """The request kind of serialized ``SessionRequest`` bytes and its body's offsets."""
    step = wire.lone_field(data, 0, len(data), _STEP_KEY)  # the common case
    if step is not None:
        return _STEP, step
    kind, body = 0, (0, 0)
    for field, wt, val in wire.fields(data, 0, len(data)):
        if field in (_OPEN, _RESET, _STEP, _CLOSE):
            if wt != 2:
                raise EncodingError(f"field {field} has wire type {wt}, expected a message")
            kind, body = field, val  # the last one wins, as for any oneof
    return kind, body


def _action_range(data: bytes, body: tuple[int, int]) -> tuple[int, int]:
    action = wire.lone_field(data, *body, _ACTION_KEY)  # the common case: only the action
    if action is not None:
        return action
    for field, wt, val in wire.fields(data, *body):
        if field == 1 and wt == 2:
            return val
    raise EncodingError("step request has no action")
