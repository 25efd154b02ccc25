"""Fuzzing the session stream: random and mutated messages never break the server.

Properties, for any sequence of messages written on an open session:

* every message gets exactly one response, in order, until the stream ends, and the
  stream only ends cleanly: after a ``closed`` response (status OK), never because
  the handler crashed;
* an error response carries INVALID_ARGUMENT, FAILED_PRECONDITION or INTERNAL (the
  env raised on odd reset options); any other response answers what was sent;
* the session still plays an episode correctly afterwards, and so does a fresh one;
* the server process never dies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.message import DecodeError
from helpers import (
    SESSION_METHOD,
    ended_with,
    open_request,
    raw_channel,
    raw_open,
    raw_roundtrip,
    reset_request,
    step_request,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import farm
from env_adapters.toy import solve_instruction
from farm import codec, wire
from farm.client import health
from farm.proto import farm_pb2 as pb
from farm.server.process import ServerProcess

INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]
ALLOWED_ERRORS = {INVALID, PRECONDITION, grpc.StatusCode.INTERNAL.value[0]}
EXPECTED_RESPONSE = {"reset": "reset", "step": "step", "close": "closed"}

VALID = [
    open_request(),
    open_request(image_encoding=pb.IMAGE_ENCODING_PNG, client_name="fuzz"),
    reset_request(),
    reset_request(seed=12345),
    reset_request(seed=-1),
    reset_request(options_json=b'{"mode":"spell","word":"abc"}'),
    reset_request(options_json=b'{"mode":"reverse"}'),
    step_request(0),
    step_request(25),
    step_request(3),
    pb.SessionRequest(close=pb.CloseRequest()).SerializeToString(),
]


_varint = wire.varint


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    base = draw(st.sampled_from(VALID))
    op = draw(
        st.sampled_from(
            ["flip", "truncate", "duplicate", "concat", "insert", "delete", "random", "wrap"]
        )
    )
    if op == "random":
        return draw(st.binary(min_size=0, max_size=64))
    if op == "wrap":  # random bytes as the action Value of a step, or as a reset's body
        payload = draw(st.binary(min_size=0, max_size=32))
        if draw(st.booleans()):
            action = b"\x0a" + _varint(len(payload)) + payload
            return b"\x1a" + _varint(len(action)) + action
        return b"\x12" + _varint(len(payload)) + payload
    if op == "duplicate":
        return base * draw(st.integers(2, 3))
    if op == "concat":
        return base + draw(st.sampled_from(VALID))
    i = draw(st.integers(0, max(len(base) - 1, 0)))
    if op == "flip":
        if not base:
            return b"\x80"
        bit = draw(st.integers(0, 7))
        out = bytearray(base)
        out[i] ^= 1 << bit
        return bytes(out)
    if op == "truncate":
        return base[:i]
    if op == "insert":
        return base[:i] + draw(st.binary(min_size=1, max_size=8)) + base[i:]
    j = draw(st.integers(i, len(base)))
    return base[:i] + base[j:]


def _request_kind(data: bytes) -> str | None:
    """What protobuf makes of ``data`` (None when it does not parse)."""
    try:
        return pb.SessionRequest.FromString(data).WhichOneof("request") or "none"
    except DecodeError:
        return None


@pytest.fixture(scope="module")
def server(sock_dir: str) -> Iterator[ServerProcess]:
    srv = ServerProcess("toy/text-task", address=f"unix://{sock_dir}/fuzz.sock")
    srv.start()
    yield srv
    assert srv.proc is not None and srv.proc.poll() is None, srv.output()
    assert srv.stop() == 0
    assert "Traceback" not in srv.output(), srv.output()


async def _oracle_episode(call, seed: int) -> None:
    resp = await raw_roundtrip(call, reset_request(seed=seed))
    assert resp.WhichOneof("response") == "reset", resp
    instruction = resp.reset.observation.dict.values[0].text
    plan = solve_instruction(instruction)
    for i, action in enumerate(plan):
        resp = await raw_roundtrip(call, step_request(action))
        assert resp.WhichOneof("response") == "step", resp
        assert resp.step.terminated == (i == len(plan) - 1)
    assert resp.step.reward == 1.0


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(messages=st.lists(mutated(), min_size=1, max_size=8), seed=st.integers(0, 2**31))
def test_mutated_messages_on_an_open_session(
    server: ServerProcess, messages: list[bytes], seed: int
) -> None:
    space = None

    async def main() -> None:
        nonlocal space
        channel = await raw_channel(server.address)
        try:
            call, opened = await raw_open(channel)
            space = codec.space_from_proto(opened.opened.env.observation_space)
            await raw_roundtrip(call, reset_request(seed=seed))
            closed = False
            for data in messages:  # one at a time: after a write fails, grpc drops all reads
                await call.write(data)
                try:
                    reply = await asyncio.wait_for(call.read(), 10)
                except grpc.aio.AioRpcError as e:
                    pytest.fail(f"stream failed with {e.code()}: {e.details()} after {data!r}")
                if reply is grpc.aio.EOF:
                    code, details = await call.code(), await call.details()
                    pytest.fail(f"stream ended ({code}: {details}) without answering {data!r}")
                resp = pb.SessionResponse.FromString(reply)
                sent = _request_kind(data)
                if resp.HasField("error"):
                    assert resp.WhichOneof("response") is None
                    assert resp.error.code in ALLOWED_ERRORS, (data, resp.error)
                    assert resp.error.message, data
                    # (protobuf keeps a field of the wrong wire type as an unknown field; the
                    # server calls such a message malformed: INVALID_ARGUMENT either way)
                    if sent == "none":
                        assert resp.error.code == INVALID, (data, resp.error)
                    elif sent == "open":
                        assert resp.error.code in (PRECONDITION, INVALID), (data, resp.error)
                    continue
                got = resp.WhichOneof("response")
                assert got in ("reset", "step", "closed"), (data, resp)
                if sent is not None:
                    assert got == EXPECTED_RESPONSE.get(sent), (data, sent, resp)
                if got in ("reset", "step"):
                    value = getattr(resp, got).observation
                    obs = codec.decode_value(space, value)
                    assert space.contains(obs), obs
                if got == "closed":
                    closed = True
                    break
            if closed:
                assert await ended_with(call) == (grpc.StatusCode.OK, "")
            else:
                await _oracle_episode(call, seed)  # the session still works
                call.cancel()
        finally:
            await channel.close()

    asyncio.run(main())
    assert server.proc is not None and server.proc.poll() is None, server.output()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(first=st.one_of(st.binary(max_size=48), mutated()))
def test_random_first_message(server: ServerProcess, first: bytes) -> None:
    try:
        req = pb.SessionRequest.FromString(first)
    except DecodeError:
        expected = grpc.StatusCode.INVALID_ARGUMENT
    else:
        if req.WhichOneof("request") == "open" and "1.0" in req.open.protocol_versions:
            expected = grpc.StatusCode.OK  # a real open: answered with `opened`
        else:
            expected = grpc.StatusCode.FAILED_PRECONDITION

    async def main() -> None:
        channel = await raw_channel(server.address)
        try:
            call = channel.stream_stream(SESSION_METHOD)()
            await call.write(first)
            if expected == grpc.StatusCode.OK:
                reply = await asyncio.wait_for(call.read(), 10)
                assert pb.SessionResponse.FromString(reply).WhichOneof("response") == "opened"
                await _oracle_episode(call, 0)
                call.cancel()
            else:
                code, details = await ended_with(call)
                assert code == expected, (first, code, details)
                assert details
        finally:
            await channel.close()

    asyncio.run(main())
    assert server.proc is not None and server.proc.poll() is None, server.output()


def test_server_alive_and_correct_after_fuzzing(server: ServerProcess) -> None:
    """Runs after the fuzz tests (same module): a fresh session plays correctly."""
    env = farm.connect(server.address)
    try:
        for seed in range(3):
            obs, _ = env.reset(seed=seed)
            plan = solve_instruction(obs["instruction"])
            for a in plan:
                obs, reward, terminated, truncated, _ = env.step(a)
            assert terminated and not truncated and reward == 1.0
            assert obs["typed"] == "".join(chr(ord("a") + a) for a in plan)
    finally:
        env.close()
    h = asyncio.run(health(server.address))
    assert h.status == pb.HealthResponse.STATUS_SERVING
    assert h.total_sessions >= 200  # (every mutated-messages example opened one)
