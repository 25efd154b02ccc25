"""Bad input never kills a session or a server: each bad request gets a clear error."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import grpc
import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium import spaces
from helpers import (
    SESSION_METHOD,
    ended_with,
    health,
    open_request,
    raw_channel,
    raw_open,
    raw_roundtrip,
    reset_request,
    step_request,
    wait_until,
)

import farm
from env_adapters.toy import solve_instruction
from farm import codec
from farm.client import AsyncSession
from farm.client import health as health_rpc
from farm.errors import (
    EncodingError,
    EnvError,
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    SandboxUnavailableError,
)
from farm.proto import farm_pb2 as pb
from farm.server import BackgroundServer, ServerConfig
from farm.server.process import ServerProcess

INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]
INTERNAL = grpc.StatusCode.INTERNAL.value[0]


class FlakyEnv(gym.Env):
    """An env with an int Box action that fails on purpose.

    action[0] == 13: step raises; action[0] == 7: step returns an observation
    outside its space's shape; reset(options={"explode": True}) raises.
    """

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-100, 100, (3,), np.float32)
        self.action_space = spaces.Box(-20, 20, (2,), np.int32)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if options and options.get("explode"):
            raise RuntimeError("reset exploded on request")
        self.t = 0
        return np.zeros(3, np.float32), {"options": options}

    def step(self, action):
        self.t += 1
        if action[0] == 13:
            raise RuntimeError(f"unlucky action {action.tolist()}")
        if action[0] == 7:
            return np.zeros(5, np.float32), 0.0, False, False, {}
        obs = np.array([action[0], action[1], self.t], np.float32)
        return obs, float(action.sum()), False, self.t >= 50, {"t": self.t}


@pytest.fixture(scope="module")
def flaky() -> Iterator[BackgroundServer]:
    with BackgroundServer(FlakyEnv, ServerConfig(executor="inline")) as srv:
        yield srv


def _good_step(env: gym.Env, t: int) -> None:
    obs, reward, terminated, truncated, info = env.step(np.array([1, 2], np.int32))
    assert not terminated and not truncated
    assert obs.tolist() == [1.0, 2.0, float(t)] and reward == 3.0 and info == {"t": t}


# ---------------------------------------------------------------- through the client


def test_action_outside_space(text_server: ServerProcess, flaky: BackgroundServer) -> None:
    env = farm.connect(text_server.address)
    try:
        obs, _ = env.reset(seed=2)
        plan = solve_instruction(obs["instruction"])
        for bad in (26, -1, 1000):
            with pytest.raises(
                InvalidArgumentError, match=r"outside the action space Discrete\(26\)"
            ):
                env.step(bad)
        obs, *_ = env.step(plan[0])  # the episode goes on where it was
        assert len(obs["typed"]) == 1
    finally:
        env.close()
    env = farm.connect(flaky.address)
    try:
        env.reset()
        with pytest.raises(InvalidArgumentError, match=r"action \[21  0\] is outside"):
            env.step(np.array([21, 0], np.int32))
        _good_step(env, 1)
    finally:
        env.close()


def test_wrong_dtype_and_shape_refused_by_client(flaky: BackgroundServer) -> None:
    env = farm.connect(flaky.address)
    try:
        env.reset()
        with pytest.raises(EncodingError, match="float64 cannot be cast safely"):
            env.step(np.array([1.0, 2.0]))
        with pytest.raises(EncodingError, match=r"shape \(3,\) does not fit"):
            env.step(np.array([1, 2, 3], np.int32))
        _good_step(env, 1)
    finally:
        env.close()


def test_float_for_discrete_refused(text_server: ServerProcess) -> None:
    env = farm.connect(text_server.address)
    try:
        env.reset(seed=0)
        with pytest.raises(EncodingError, match="not an integer"):
            env.step(1.5)
        with pytest.raises(EncodingError, match="not an integer"):
            env.step(np.array([1.0]))
        obs, *_ = env.step(0)
        assert len(obs["typed"]) == 1
    finally:
        env.close()


def test_step_before_reset_and_after_termination(text_server: ServerProcess) -> None:
    env = farm.connect(text_server.address)
    try:
        with pytest.raises(
            FailedPreconditionError, match=r"no episode has started; call reset\(\)"
        ):
            env.step(0)
        obs, _ = env.reset(seed=3)
        plan = solve_instruction(obs["instruction"])
        for a in plan:
            *_, terminated, _, _ = env.step(a)
        assert terminated
        with pytest.raises(
            FailedPreconditionError,
            match=rf"episode has ended \(terminated after {len(plan)} steps\)",
        ):
            env.step(0)
        # a wrong letter terminates too
        env.reset(seed=3)
        wrong = (plan[0] + 1) % 26
        _, reward, terminated, _, info = env.step(wrong)
        assert terminated and reward == 0.0 and info == {"correct": False}
        with pytest.raises(FailedPreconditionError, match="terminated after 1 steps"):
            env.step(0)
        assert env.reset(seed=3)[0]["typed"] == ""
    finally:
        env.close()


def test_reset_with_bad_options(text_server: ServerProcess, flaky: BackgroundServer) -> None:
    env = farm.connect(text_server.address)
    try:
        with pytest.raises(EnvError, match=r"env.reset\(\) raised ValueError: invalid options"):
            env.reset(options={"mode": "sideways"})
        with pytest.raises(FailedPreconditionError, match=r"the last reset\(\) failed"):
            env.step(0)
        obs, info = env.reset(options={"mode": "spell", "word": "abc"})
        assert obs["instruction"] == 'Type the word "abc", one letter per step.'
        assert info == {"mode": "spell", "length": 3}
    finally:
        env.close()
    env = farm.connect(flaky.address)
    try:
        with pytest.raises(EnvError, match="RuntimeError: reset exploded on request"):
            env.reset(options={"explode": True})
        _, info = env.reset(options={"explode": False, "n": [1, 2]})
        assert info == {"options": {"explode": False, "n": [1, 2]}}
    finally:
        env.close()


def test_env_that_raises_in_step(flaky: BackgroundServer) -> None:
    env = farm.connect(flaky.address)
    try:
        env.reset()
        _good_step(env, 1)
        with pytest.raises(EnvError, match=r"RuntimeError: unlucky action \[13, 0\].*call reset"):
            env.step(np.array([13, 0], np.int32))
        with pytest.raises(FailedPreconditionError, match=r"env.step\(\) raised; call reset"):
            env.step(np.array([1, 2], np.int32))
        env.reset()
        _good_step(env, 1)
        _good_step(env, 2)
        # an observation that does not fit the space is an INTERNAL error, not a crash
        with pytest.raises(EnvError, match="returned data that cannot be sent"):
            env.step(np.array([7, 0], np.int32))
        env.reset()
        _good_step(env, 1)
        assert len(flaky.service.sessions) == 1
    finally:
        env.close()


def test_env_that_fails_to_construct() -> None:
    def broken() -> gym.Env:
        raise OSError("no display available")

    with BackgroundServer(broken) as srv:
        with pytest.raises(EnvError, match=r"could not create env.*OSError: no display available"):
            farm.connect(srv.address)
        assert srv.service.sessions == {}
        with pytest.raises(EnvError, match="could not create env"):
            asyncio.run(farm.client.describe(srv.address))


# ---------------------------------------------------------------- raw bytes


def _raw_case(address: str, body: Any) -> Any:
    async def main() -> Any:
        channel = await raw_channel(address)
        try:
            return await body(channel)
        finally:
            await channel.close()

    return asyncio.run(main())


def test_server_side_validation_of_raw_actions(flaky: BackgroundServer) -> None:
    """What a non-Python client could send: the server validates every action."""

    async def body(channel: grpc.aio.Channel) -> None:
        call, opened = await raw_open(channel)
        assert opened.opened.protocol_version == "1.0"
        resp = await raw_roundtrip(call, reset_request())
        assert resp.WhichOneof("response") == "reset"

        def step_with(fill) -> bytes:
            req = pb.SessionRequest()
            req.step.action.SetInParent()
            fill(req.step.action)
            return req.SerializeToString()

        no_action = pb.SessionRequest(step=pb.StepRequest()).SerializeToString()
        cases = [
            (
                step_with(lambda v: setattr(v, "int", 3)),
                "expects a value of kind 'array', got 'int'",
            ),
            (
                step_with(lambda v: codec.array_to_proto(np.array([1.0, 2.0]), v.array)),
                "float64 cannot be cast safely to int32",
            ),
            (
                step_with(lambda v: codec.array_to_proto(np.array([1, 2, 3], np.int32), v.array)),
                r"shape \(3,\) does not fit",
            ),
            (
                step_with(
                    lambda v: v.array.CopyFrom(pb.Array(dtype="<i4", shape=[2], data=b"1234567"))
                ),
                "needs 8 bytes, got 7",
            ),
            (
                step_with(lambda v: v.array.CopyFrom(pb.Array(dtype="<q9", shape=[2]))),
                "unknown dtype '<q9'",
            ),
            (
                step_with(
                    lambda v: v.array.CopyFrom(pb.Array(dtype="<U2", shape=[2], data=b"\0" * 16))
                ),
                "not a numeric dtype",
            ),
            (
                step_with(lambda v: codec.array_to_proto(np.array([100, 0], np.int32), v.array)),
                r"action \[100   0\] is outside the action space",
            ),
            (step_with(lambda v: None), "expects a value of kind 'array', got None"),
            (no_action, "step request has no action"),
        ]
        for request, expected in cases:
            resp = await raw_roundtrip(call, request)
            assert resp.HasField("error"), resp
            assert resp.error.code == INVALID, resp.error
            assert re.search(expected, resp.error.message), resp.error.message
        good = step_with(lambda v: codec.array_to_proto(np.array([4, 5], np.int32), v.array))
        resp = await raw_roundtrip(call, good)
        assert resp.step.reward == 9.0 and resp.step.info_json == b'{"t":1}'

        bad_options = reset_request(options_json=b"{not json")
        resp = await raw_roundtrip(call, bad_options)
        assert resp.error.code == INVALID and "not valid JSON" in resp.error.message
        resp = await raw_roundtrip(call, reset_request(options_json=b"[1, 2]"))
        assert resp.error.code == INVALID and "must be a JSON object" in resp.error.message
        again = await raw_roundtrip(call, open_request())
        assert again.error.code == PRECONDITION and "already open" in again.error.message
        resp = await raw_roundtrip(call, b"")
        assert resp.error.code == INVALID and "no request set" in resp.error.message
        resp = await raw_roundtrip(call, reset_request(seed=1))
        assert resp.WhichOneof("response") == "reset"
        closed = await raw_roundtrip(
            call, pb.SessionRequest(close=pb.CloseRequest()).SerializeToString()
        )
        assert closed.WhichOneof("response") == "closed"
        assert await ended_with(call) == (grpc.StatusCode.OK, "")

    _raw_case(flaky.address, body)


def test_garbage_first_message(text_server: ServerProcess) -> None:
    async def body(channel: grpc.aio.Channel) -> None:
        for garbage in (b"\xff\xff\xff\xff\xff", b"\x0a\x50abc", b"\x0f", b"\x08\x80"):
            call = channel.stream_stream(SESSION_METHOD)()
            await call.write(garbage)
            code, details = await ended_with(call)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (garbage, code, details)
            assert "malformed first SessionRequest" in details
        # well-formed, but not `open`
        call = channel.stream_stream(SESSION_METHOD)()
        await call.write(reset_request(seed=0))
        code, details = await ended_with(call)
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert "must be `open`" in details

    _raw_case(text_server.address, body)
    env = farm.connect(text_server.address)
    assert env.reset(seed=0)[0]["typed"] == ""
    env.close()


def test_garbage_after_open(text_server: ServerProcess) -> None:
    async def body(channel: grpc.aio.Channel) -> None:
        call, _ = await raw_open(channel)
        first = await raw_roundtrip(call, reset_request(seed=9))
        instruction = first.reset.observation.dict.values[0].text
        plan = solve_instruction(instruction)
        for i, garbage in enumerate((b"\xff\xff\xff", b"\x12\x05ab", b"\x1a\x03\x0a\x01", b"\x08")):
            resp = await raw_roundtrip(call, garbage)
            assert resp.HasField("error"), (garbage, resp)
            assert resp.error.code == INVALID, (garbage, resp.error)
            assert resp.error.message, garbage
            # the episode is still there, at the same point
            resp = await raw_roundtrip(call, step_request(plan[i]))
            assert resp.WhichOneof("response") == "step"
            assert resp.step.observation.dict.values[1].text == "".join(
                chr(ord("a") + a) for a in plan[: i + 1]
            )
        call.cancel()

    _raw_case(text_server.address, body)


def test_oversized_message(sock_path) -> None:
    with ServerProcess(
        "toy/text-task", address=sock_path("big"), args=["--max-message-mb", "1"]
    ) as srv:

        async def body(channel: grpc.aio.Channel) -> None:
            call, _ = await raw_open(channel)
            await raw_roundtrip(call, reset_request(seed=0))
            req = pb.SessionRequest()
            req.step.action.text = "x" * (2 << 20)
            await call.write(req.SerializeToString())
            code, details = await ended_with(call)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
            # just under the limit is fine (and merely an invalid action)
            call2, _ = await raw_open(channel)
            await raw_roundtrip(call2, reset_request(seed=0))
            req.step.action.text = "x" * ((1 << 20) - 100)
            resp = await raw_roundtrip(call2, req.SerializeToString())
            assert resp.error.code == INVALID
            call2.cancel()

        _raw_case(srv.address, body)

        async def via_client() -> None:
            session = await AsyncSession.open(srv.address)
            try:
                await session.reset(seed=0)
                await session._send(
                    pb.SessionRequest(step=pb.StepRequest(action=pb.Value(text="y" * (3 << 20)))),
                    "step",
                )
                with pytest.raises(ResourceExhaustedError):
                    await session.recv()
            finally:
                await session.close()

        asyncio.run(via_client())
        wait_until(lambda: health(srv.address).active_sessions == 0)
        env = farm.connect(srv.address)
        obs, _ = env.reset(seed=1)
        for a in solve_instruction(obs["instruction"]):
            _, reward, terminated, *_ = env.step(a)
        assert terminated and reward == 1.0
        env.close()
        assert srv.proc.poll() is None


# ---------------------------------------------------------------- vanishing clients


@pytest.fixture(scope="module")
def slow_server(sock_dir: str) -> Iterator[ServerProcess]:
    kwargs = '{"dist": "constant", "median_s": 2.0, "episode_length": 100}'
    srv = ServerProcess("toy/latency", address=f"unix://{sock_dir}/slow.sock", env_kwargs=kwargs)
    srv.start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("how", ["cancel_task", "close_channel"])
def test_client_disconnects_mid_step(slow_server: ServerProcess, how: str) -> None:
    async def main() -> None:
        if how == "cancel_task":  # asyncio cancellation of a task waiting for the step
            session = await AsyncSession.open(slow_server.address)
            await session.reset(seed=0)
            waiting = asyncio.ensure_future(session.step(1))
        else:  # the connection goes away
            channel = await raw_channel(slow_server.address)
            call, _ = await raw_open(channel)
            await raw_roundtrip(call, reset_request(seed=0))
            await call.write(step_request(1))
        await asyncio.sleep(0.3)  # the server is now sleeping inside astep
        assert (await health_rpc(slow_server.address)).active_sessions == 1
        start = time.monotonic()
        if how == "cancel_task":
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        else:
            await channel.close()
        # dropped well before the 2 s step would have finished
        while (await health_rpc(slow_server.address)).active_sessions:
            assert time.monotonic() - start < 1.5, "the server kept the abandoned session"
            await asyncio.sleep(0.02)
        if how == "cancel_task":
            await session.close()

    asyncio.run(main())
    # the server keeps serving
    env = farm.connect(slow_server.address)
    try:
        env.reset(seed=1)
        start = time.monotonic()
        obs, reward, terminated, truncated, info = env.step(1)
        assert 1.9 < time.monotonic() - start < 5
        assert info["delay_s"] == 2.0 and obs.shape == (4,) and reward in (0.0, 1.0)
        assert not terminated and not truncated
    finally:
        env.close()


# ---------------------------------------------------------------- idle reaping


def test_idle_session_is_reaped(sock_path) -> None:
    kwargs = '{"dist": "constant", "median_s": 1.2}'
    args = ["--idle-timeout", "0.5"]
    with ServerProcess(
        "toy/latency", address=sock_path("idle"), args=args, env_kwargs=kwargs
    ) as srv:
        idle = farm.connect(srv.address, reconnect=False)
        busy = farm.connect(srv.address)
        busy.reset(seed=0)
        # a step longer than the idle timeout is work, not idleness
        _, _, terminated, truncated, info = busy.step(0)
        assert not terminated and not truncated and info["delay_s"] == 1.2
        h = wait_until(lambda: (h := health(srv.address)).reaped_sessions >= 2 and h, timeout=10)
        assert h.active_sessions == 0  # both sessions went silent long enough
        with pytest.raises(SandboxUnavailableError) as err:
            idle.reset(seed=0)
        # (the sync client's loop is idle between calls, so it may only see the broken stream;
        # test_reaped_session_sees_deadline_exceeded checks the status an async client gets)
        assert err.value.code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
        # the reconnecting env reports the cut and comes back on reset
        _, _, _, truncated, info = busy.step(1)
        assert truncated and "farm.truncated_reason" in info
        busy.reset(seed=0)
        assert busy.step(1)[4]["delay_s"] == 1.2
        busy.close()
        idle.close()


def test_reaped_session_sees_deadline_exceeded(sock_path) -> None:
    with BackgroundServer("toy/text-task", ServerConfig(idle_timeout_s=0.3)) as srv:

        async def main() -> None:
            session = await AsyncSession.open(srv.address)
            await session.reset(seed=0)
            await asyncio.sleep(1.0)
            with pytest.raises(SandboxUnavailableError) as err:
                await session.step(0)
            assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "idle for more than 0.3 s and has been reaped" in str(err.value)
            await session.close()

        asyncio.run(main())
        assert srv.service.reaped_sessions == 1
        assert srv.service.sessions == {}


# ---------------------------------------------------------------- many abandoned sessions


async def _open_and_abandon(
    channel: grpc.aio.Channel, n: int, batch: int, keep: list[Any]
) -> tuple[int, int]:
    """Open ``n`` sessions, ``batch`` at a time; cancel half, leave half silent."""
    opened = refused = 0
    for start in range(0, n, batch):

        async def one(i: int) -> bool:
            call = channel.stream_stream(SESSION_METHOD)()
            await call.write(open_request(client_name=f"abandoned-{i}"))
            data = await call.read()
            if data is grpc.aio.EOF:
                return False
            if i % 2:
                call.cancel()
            else:
                keep.append(call)  # dropped without closing: the server must reap it
            return True

        results = await asyncio.gather(*(one(start + i) for i in range(min(batch, n - start))))
        opened += sum(results)
        refused += len(results) - sum(results)
        keep[:] = [c for c in keep if not c.done()]
    return opened, refused


@pytest.mark.slow
def test_ten_thousand_abandoned_sessions(sock_path) -> None:
    args = ["--idle-timeout", "1", "--max-sessions", "5000"]
    # Each env is built on a worker thread; glibc's per-thread malloc arenas then make RSS
    # wander by +-10 MiB. Two arenas keep the noise at ~2 MiB, so a leak shows.
    environ = {"MALLOC_ARENA_MAX": "2"}
    address = sock_path("many")
    with ServerProcess("toy/text-task", address=address, args=args, environ=environ) as srv:
        proc = psutil.Process(srv.pid)
        keep: list[Any] = []

        async def run(n: int) -> tuple[int, int, float]:
            channel = await raw_channel(srv.address)
            try:
                start = time.monotonic()
                opened, refused = await _open_and_abandon(channel, n, 200, keep)
                elapsed = time.monotonic() - start
                deadline = time.monotonic() + 30
                while (await health_rpc(srv.address)).active_sessions:
                    assert time.monotonic() < deadline, "abandoned sessions were not reaped"
                    await asyncio.sleep(0.2)
                keep.clear()
                return opened, refused, elapsed
            finally:
                await channel.close()

        def rss_mib() -> float:
            time.sleep(0.5)  # let the last env closes finish
            return proc.memory_info().rss / 2**20

        # warm-up: more sessions than are alive at once in the steady state (~1 s of
        # opening at ~1000/s, until reaped), so the allocator reaches its high-water mark
        assert asyncio.run(run(3000))[:2] == (3000, 0)
        rss_warm, threads_warm = rss_mib(), proc.num_threads()
        h_warm = health(srv.address)

        opened, refused, elapsed_1 = asyncio.run(run(5000))
        rss_half = rss_mib()
        assert (opened, refused) == (5000, 0)
        opened, refused, elapsed_2 = asyncio.run(run(5000))
        rss_end = rss_mib()
        assert (opened, refused) == (5000, 0)
        h = health(srv.address)
        elapsed = elapsed_1 + elapsed_2
        print(
            f"\n10k abandoned sessions: opened in {elapsed:.1f} s ({10_000 / elapsed:.0f}/s); "
            f"server RSS after warm-up (3000 sessions) {rss_warm:.1f} MiB, after +5k "
            f"{rss_half:.1f} MiB, after +10k {rss_end:.1f} MiB: growth {rss_end - rss_warm:+.1f} "
            f"MiB ({(rss_end - rss_warm) * 2**20 / 10_000:+.0f} B/session), second 5k "
            f"{rss_end - rss_half:+.1f} MiB; threads {threads_warm} -> {proc.num_threads()}; "
            f"reaped {h.reaped_sessions}, total {h.total_sessions}"
        )
        assert h.active_sessions == 0
        assert h.total_sessions == h_warm.total_sessions + 10_000 == 13_000
        assert h.reaped_sessions - h_warm.reaped_sessions >= 4_000  # the silent half
        assert proc.num_threads() <= threads_warm + 2, "worker threads were left behind"
        # Measured (2 cores): growth -2..+11 MiB, the second 5k -3..+4 MiB (allocator noise),
        # but the allocator can also hand back ~9 MiB in between and take it again (CI: 108.1
        # -> 99.0 -> 107.4 MiB), so the second half is measured from the highest earlier
        # reading. A leak of 2 KB a session rises at every reading: +20 MiB over 10k, +10 MiB
        # over the second 5k above both earlier ones.
        assert rss_end - rss_warm < 20, f"RSS grew by {rss_end - rss_warm:.1f} MiB over 10k"
        highest = max(rss_warm, rss_half)
        assert rss_end - highest < 8, f"RSS kept growing: {rss_end - highest:+.1f} MiB"

        env = farm.connect(srv.address)
        obs, _ = env.reset(seed=5)
        for a in solve_instruction(obs["instruction"]):
            _, reward, terminated, *_ = env.step(a)
        assert terminated and reward == 1.0
        env.close()
        assert srv.proc.poll() is None
