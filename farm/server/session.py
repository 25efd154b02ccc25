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

from farm import codec
from farm.env import EnvRunner
from farm.errors import EncodingError, RemoteError
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
                req = pb.SessionRequest.FromString(data)
            except DecodeError as e:
                return error_response(
                    _INVALID, f"malformed SessionRequest ({len(data)} bytes): {e}"
                )
            kind = req.WhichOneof("request")
            if kind == "step":
                return await self._step(req.step)
            if kind == "reset":
                return await self._reset(req.reset)
            if kind == "close":
                self.closed = True
                resp = pb.SessionResponse()
                resp.closed.SetInParent()
                return resp.SerializeToString()
            if kind == "open":
                return error_response(_PRECONDITION, "this session is already open")
            return error_response(_INVALID, "SessionRequest has no request set")
        finally:
            self.busy = False
            self.last_active = time.monotonic()

    def _encode_observation(self, obs: Any, out: pb.Value) -> None:
        codec.encode_value(self.observation_space, obs, out)
        if self.image_encoding != pb.IMAGE_ENCODING_RAW:
            from farm.images import encode_images_in_value

            encode_images_in_value(out, self.image_encoding, self.jpeg_quality)

    async def _reset(self, msg: pb.ResetRequest) -> bytes:
        seed = msg.seed if msg.HasField("seed") else None
        try:
            options = codec.decode_info(msg.options_json) or None
        except EncodingError as e:
            return error_response(_INVALID, f"invalid reset options: {e}")
        self.running = False
        self.end_reason = "the last reset() failed; call reset() again"
        try:
            obs, info = await self.runner.reset(seed, options)
        except Exception as e:  # noqa: BLE001 - the env's failure is reported, never fatal
            return error_response(*_env_failure("env.reset()", e))
        resp = pb.SessionResponse()
        try:
            self._encode_observation(obs, resp.reset.observation)
            resp.reset.info_json = codec.encode_info(info)
        except (EncodingError, TypeError, ValueError) as e:
            return error_response(
                _INTERNAL, f"env.reset() returned an observation/info that cannot be sent: {e}"
            )
        self.running = True
        self.steps = 0
        return resp.SerializeToString()

    async def _step(self, msg: pb.StepRequest) -> bytes:
        if not self.running:
            return error_response(_PRECONDITION, f"step() refused: {self.end_reason}")
        try:
            action = codec.decode_value(self.action_space, msg.action)
        except EncodingError as e:
            return error_response(_INVALID, f"invalid action: {e}")
        if not self.action_space.contains(action):
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
        resp = pb.SessionResponse()
        step = resp.step
        try:
            self._encode_observation(obs, step.observation)
            step.reward = float(reward)
            step.info_json = codec.encode_info(info)
        except (EncodingError, TypeError, ValueError) as e:
            self.running = False
            self.end_reason = "the env returned an invalid step; call reset()"
            return error_response(_INTERNAL, f"env.step() returned data that cannot be sent: {e}")
        step.terminated = bool(terminated)
        step.truncated = bool(truncated)
        if terminated or truncated:
            self.running = False
            self.end_reason = (
                f"the episode has ended ({'terminated' if terminated else 'truncated'} "
                f"after {self.steps} steps); call reset() to start a new one"
            )
        return resp.SerializeToString()
