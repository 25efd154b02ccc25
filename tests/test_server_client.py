"""A real ``farm serve`` process and the clients: the remote env behaves like the local one."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env, data_equivalence
from helpers import health, raw_channel, raw_open, raw_roundtrip, reset_request, wait_until

import farm
from env_adapters.toy import solve_instruction
from farm import codec
from farm.client import AsyncSession, describe
from farm.errors import (
    ConfigError,
    FailedPreconditionError,
    InvalidArgumentError,
    ProtocolError,
    ResourceExhaustedError,
    SandboxUnavailableError,
    UnauthenticatedError,
)
from farm.proto import farm_pb2 as pb
from farm.server import BackgroundServer, ServerConfig
from farm.server.process import ServerProcess


def heuristic(obs: np.ndarray) -> int:
    """Balances CartPole for the full 500 steps from most starts."""
    return int(obs[2] + obs[3] > 0)


@pytest.fixture(scope="module")
def cartpole(sock_dir: str) -> Iterator[ServerProcess]:
    srv = ServerProcess("CartPole-v1", address=f"unix://{sock_dir}/cartpole.sock")
    srv.start()
    yield srv
    srv.stop()


def play(env: gym.Env, seed: int, policy: str, rng: np.random.Generator | None = None) -> list:
    """One full episode; returns every transition (obs, reward, terminated, truncated)."""
    obs, _ = env.reset(seed=seed)
    trajectory = [(obs, None, None, None)]
    while True:
        action = heuristic(obs) if policy == "heuristic" else int(rng.integers(2))
        obs, reward, terminated, truncated, _ = env.step(action)
        trajectory.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            return trajectory


def assert_same_trajectory(remote: list, local: list) -> None:
    assert len(remote) == len(local)
    for t, ((ro, rr, rte, rtr), (lo, lr, lte, ltr)) in enumerate(zip(remote, local, strict=True)):
        assert ro.dtype == lo.dtype and ro.shape == lo.shape, t
        assert np.array_equal(ro, lo), f"observations differ at step {t}: {ro} != {lo}"
        assert (rr, rte, rtr) == (lr, lte, ltr), f"step {t}"
        if rr is not None:
            assert type(rr) is float and type(rte) is bool and type(rtr) is bool


# ---------------------------------------------------------------- gymnasium conformance


def test_cartpole_passes_check_env(cartpole: ServerProcess) -> None:
    env = farm.connect(cartpole.address)
    try:
        check_env(env, skip_render_check=True)
        local = gym.make("CartPole-v1")
        assert env.observation_space == local.observation_space
        assert env.action_space == local.action_space
    finally:
        env.close()


def test_cartpole_episodes_identical_to_local(cartpole: ServerProcess) -> None:
    env = farm.connect(cartpole.address)
    local = gym.make("CartPole-v1")
    try:
        outcomes = []
        for seed, policy in ((0, "heuristic"), (1, "heuristic"), (7, "random"), (8, "random")):
            remote = play(env, seed, policy, np.random.default_rng(seed))
            here = play(local, seed, policy, np.random.default_rng(seed))
            assert_same_trajectory(remote, here)
            outcomes.append((len(remote) - 1, remote[-1][2], remote[-1][3]))
    finally:
        env.close()
    # seed 0: the heuristic falls after 334 steps; seed 1 reaches the TimeLimit (truncation)
    assert outcomes[0] == (334, True, False)
    assert outcomes[1] == (500, False, True)
    assert all(term and not trunc for _, term, trunc in outcomes[2:])


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [("toy/text-task", None), ("toy/pixels", '{"height": 24, "width": 40}')],
)
def test_toy_envs_pass_check_env(env_id: str, kwargs: str | None) -> None:
    with ServerProcess(env_id, env_kwargs=kwargs) as srv:
        env = farm.connect(srv.address)
        try:
            check_env(env, skip_render_check=True)
            if env_id == "toy/pixels":
                assert env.observation_space.shape == (24, 40, 3)
        finally:
            env.close()


def test_async_client_same_semantics(cartpole: ServerProcess) -> None:
    local = gym.make("CartPole-v1")
    expected = play(local, 3, "heuristic")

    async def main() -> None:
        env = await farm.aconnect(cartpole.address)
        try:
            assert env.observation_space == local.observation_space
            assert env.action_space == local.action_space
            obs, _ = await env.reset(seed=3)
            trajectory = [(obs, None, None, None)]
            while True:
                obs, reward, terminated, truncated, _ = await env.step(heuristic(obs))
                trajectory.append((obs, reward, terminated, truncated))
                if terminated or truncated:
                    break
            assert_same_trajectory(trajectory, expected)
            with pytest.raises(FailedPreconditionError, match="episode has ended"):
                await env.step(0)
            with pytest.raises(InvalidArgumentError, match="outside the action space"):
                await env.reset(seed=3)
                await env.step(2)
            obs, _ = await env.reset(seed=3)  # still usable
            assert np.array_equal(obs, expected[0][0])
        finally:
            await env.close()

    asyncio.run(main())


# ---------------------------------------------------------------- pipelining


def test_pipelined_steps_equal_unpipelined(cartpole: ServerProcess) -> None:
    local = gym.make("CartPole-v1")
    obs, _ = local.reset(seed=5)
    actions, local_results = [], []
    for _ in range(50):
        actions.append(heuristic(obs))
        obs, reward, terminated, truncated, _ = local.step(actions[-1])
        local_results.append((obs, reward, terminated, truncated))

    async def main() -> None:
        session = await AsyncSession.open(cartpole.address)
        try:
            # unpipelined
            first_obs, _ = await session.reset(seed=5)
            sequential = [await session.step(a) for a in actions]
            # pipelined: 1 reset + 50 steps written before reading anything
            await session.send_reset(seed=5)
            for a in actions:
                await session.send_step(a)
            assert session.pending == 51
            obs, _ = await session.recv()
            pipelined = [await session.recv() for _ in actions]
            assert session.pending == 0
        finally:
            await session.close()
        assert np.array_equal(obs, first_obs)
        for t, (p, s, lo) in enumerate(zip(pipelined, sequential, local_results, strict=True)):
            assert np.array_equal(p[0], s[0]) and p[1:4] == s[1:4], t
            assert np.array_equal(p[0], lo[0]) and p[1:4] == lo[1:4], t

    asyncio.run(main())


def test_pipelined_error_gets_its_own_response(cartpole: ServerProcess) -> None:
    """An invalid request in the middle of a pipeline fails alone; later ones still run."""

    async def main() -> None:
        session = await AsyncSession.open(cartpole.address)
        try:
            await session.send_reset(seed=0)
            await session.send_step(0)
            await session.send_step(7)  # outside Discrete(2)
            await session.send_step(1)
            await session.recv()
            assert len(await session.recv()) == 5
            with pytest.raises(
                InvalidArgumentError,
                match=r"action (np\.int64\()?7\)? is outside the action space Discrete\(2\)",
            ):
                await session.recv()
            obs, reward, terminated, truncated, _ = await session.recv()
            assert reward == 1.0 and not terminated and not truncated and obs.shape == (4,)
        finally:
            await session.close()

    asyncio.run(main())


# ---------------------------------------------------------------- describe, health


def test_describe_and_health() -> None:
    with ServerProcess("CartPole-v1", args=["--max-sessions", "5"]) as srv:
        d = asyncio.run(describe(srv.address))
        assert list(d.protocol_versions) == ["1.0"]
        assert d.server_version == farm.__version__
        assert d.env.env_id == "CartPole-v1"
        local = gym.make("CartPole-v1")
        assert codec.space_from_proto(d.env.observation_space) == local.observation_space
        assert codec.space_from_proto(d.env.action_space) == local.action_space
        assert codec.decode_info(d.env.metadata_json)["render_fps"] == 50

        h0 = health(srv.address)
        assert h0.status == pb.HealthResponse.STATUS_SERVING
        assert h0.env_id == "CartPole-v1"
        assert h0.server_version == farm.__version__
        assert (h0.active_sessions, h0.total_sessions, h0.max_sessions) == (0, 0, 5)
        assert h0.uptime_s > 0

        envs = [farm.connect(srv.address) for _ in range(3)]
        h1 = health(srv.address)
        assert (h1.active_sessions, h1.total_sessions) == (3, 3)
        assert h1.uptime_s > h0.uptime_s
        envs.pop().close()
        h2 = wait_until(lambda: (h := health(srv.address)).active_sessions == 2 and h)
        assert h2.total_sessions == 3 and h2.reaped_sessions == 0
        for env in envs:
            env.close()
        wait_until(lambda: health(srv.address).active_sessions == 0)


# ---------------------------------------------------------------- auth, versions


@pytest.mark.parametrize("delay_s", [0.0, 0.002, 0.01, 0.3])
def test_a_refused_open_reports_the_servers_status_however_the_race_goes(monkeypatch, delay_s):
    """A wrong token ends the call at once; the client's `open` may be written before that
    status arrives, while it arrives (gRPC core fails the write: INTERNAL) or after the call
    has finished ("RPC already finished"). Each way the error is the server's own status."""
    from grpc.aio._call import StreamStreamCall

    write = StreamStreamCall.write

    async def late_write(self, request):  # the open goes out `delay_s` after the call starts
        await asyncio.sleep(delay_s)
        return await write(self, request)

    monkeypatch.setattr(StreamStreamCall, "write", late_write)
    with ServerProcess("toy/text-task", args=["--token", "s3cret-token"]) as srv:
        for _ in range(3):
            with pytest.raises(UnauthenticatedError, match="missing or wrong token"):
                farm.connect(srv.address, token="wrong")


def test_token_auth() -> None:
    with ServerProcess("toy/text-task", args=["--token", "s3cret-token"]) as srv:
        for token in (None, "wrong", "s3cret-token-but-longer", ""):
            with pytest.raises(UnauthenticatedError, match="missing or wrong token"):
                farm.connect(srv.address, token=token)
            with pytest.raises(UnauthenticatedError):
                health(srv.address, token=token)
            with pytest.raises(UnauthenticatedError):
                asyncio.run(describe(srv.address, token=token))
        env = farm.connect(srv.address, token="s3cret-token")
        try:
            obs, _ = env.reset(seed=0)
            for a in solve_instruction(obs["instruction"]):
                *_, terminated, _, _ = env.step(a)
            assert terminated
            h = health(srv.address, token="s3cret-token")
            assert h.active_sessions == 1
            assert asyncio.run(describe(srv.address, token="s3cret-token")).env.env_id
        finally:
            env.close()


def test_protocol_version_mismatch(text_server: ServerProcess) -> None:
    async def main() -> None:
        with pytest.raises((ProtocolError, FailedPreconditionError)) as info:
            await AsyncSession.open(text_server.address, protocol_versions=("9.0",))
        message = str(info.value)
        assert "['9.0']" in message and "['1.0']" in message, message
        assert "version" in message
        # a client speaking several versions gets the common one
        session = await AsyncSession.open(text_server.address, protocol_versions=("9.0", "1.0"))
        assert session.protocol_version == "1.0"
        await session.close()

    asyncio.run(main())


# ---------------------------------------------------------------- images


def test_png_is_lossless_jpeg_is_close() -> None:
    with ServerProcess("toy/pixels", env_kwargs='{"height": 48, "width": 64}') as srv:
        envs = {
            enc: farm.connect(srv.address, image_encoding=enc) for enc in ("raw", "png", "jpeg")
        }
        try:
            for seed in (0, 1):
                out = {enc: env.reset(seed=seed)[0] for enc, env in envs.items()}
                for action in (0, 3):
                    steps = {enc: env.step(action)[0] for enc, env in envs.items()}
                    for enc in out:
                        out[enc] = np.concatenate([out[enc], steps[enc]])
                assert out["raw"].dtype == np.uint8
                assert np.array_equal(out["png"], out["raw"])
                jpeg, raw = out["jpeg"], out["raw"]
                assert jpeg.shape == raw.shape and jpeg.dtype == np.uint8
                assert not np.array_equal(jpeg, raw)  # it really went through JPEG
                # toy/pixels frames are uniform noise, JPEG's worst case: still correlated
                assert np.corrcoef(jpeg.ravel(), raw.ravel())[0, 1] > 0.5
                assert np.abs(jpeg.astype(int) - raw).mean() < 64
        finally:
            for env in envs.values():
                env.close()


class GradientEnv(gym.Env):
    """A smooth image (JPEG's easy case) plus a non-image array that must stay raw."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (64, 96, 3), np.uint8),
                "small": spaces.Box(0, 255, (4, 4), np.uint8),
            }
        )
        self.action_space = spaces.Discrete(2)

    def _obs(self, shift: int) -> dict:
        y, x = np.mgrid[0:64, 0:96]
        image = np.stack([x * 2 + shift, y * 3, (x + y + shift) % 256], -1) % 256
        return {"image": image.astype(np.uint8), "small": np.full((4, 4), 7 + shift, np.uint8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(0), {}

    def step(self, action):
        return self._obs(int(action) * 10), 0.0, False, False, {}


def test_image_encodings_on_the_wire() -> None:
    with BackgroundServer(GradientEnv) as srv:
        raw = farm.connect(srv.address)
        jpeg = farm.connect(srv.address, image_encoding="jpeg", jpeg_quality=95)
        try:
            a, _ = raw.reset()
            b, _ = jpeg.reset()
            diff = np.abs(a["image"].astype(int) - b["image"])
            assert diff.mean() < 3, diff.mean()
            assert np.array_equal(a["small"], b["small"])  # too small to be an image: raw
            a = raw.step(1)[0]
            b = jpeg.step(1)[0]
            assert np.abs(a["image"].astype(int) - b["image"]).mean() < 3
        finally:
            raw.close()
            jpeg.close()

        async def wire(encoding: int) -> pb.Value:
            channel = await raw_channel(srv.address)
            try:
                call, _ = await raw_open(channel, image_encoding=encoding)
                resp = await raw_roundtrip(call, reset_request(seed=0))
                call.cancel()
                return resp.reset.observation
            finally:
                await channel.close()

        for encoding, magic in (
            (pb.IMAGE_ENCODING_PNG, b"\x89PNG"),
            (pb.IMAGE_ENCODING_JPEG, b"\xff\xd8"),
        ):
            value = asyncio.run(wire(encoding))
            image, small = value.dict.values
            assert image.array.encoding == encoding and image.array.data.startswith(magic)
            assert list(image.array.shape) == [64, 96, 3]
            assert small.array.encoding == pb.IMAGE_ENCODING_RAW
            assert len(image.array.data) < 64 * 96 * 3  # a smooth image compresses


# ---------------------------------------------------------------- transports, lifecycle


def _oracle_episode(address: str) -> None:
    env = farm.connect(address)
    try:
        for seed in (0, 1):
            obs, info = env.reset(seed=seed)
            plan = solve_instruction(obs["instruction"])
            assert len(plan) == info["length"]
            total = 0.0
            for i, a in enumerate(plan):
                obs, reward, terminated, truncated, info = env.step(a)
                total += reward
                assert terminated == (i == len(plan) - 1) and not truncated
                assert info == {"correct": True}
            assert total == 1.0
    finally:
        env.close()


def test_unix_socket_and_tcp(text_server: ServerProcess, text_server_tcp: ServerProcess) -> None:
    assert text_server.address.startswith("unix:///")
    assert os.path.exists(text_server.address[len("unix://") :])
    host, _, port = text_server_tcp.address.rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0
    _oracle_episode(text_server.address)
    _oracle_episode(text_server_tcp.address)


def test_sigterm_exits_cleanly_and_removes_socket(sock_path) -> None:
    address = sock_path("term")
    path = address[len("unix://") :]
    srv = ServerProcess("toy/text-task", address=address)
    srv.start()
    try:
        assert os.path.exists(path)
        env = farm.connect(srv.address)
        env.reset(seed=0)
        assert srv.stop() == 0
        assert not os.path.exists(path), "the unix socket file was left behind"
        assert "server stopped" in srv.output()
        # the client learns that its sandbox is gone: the episode is reported truncated
        _, reward, terminated, truncated, info = env.step(0)
        assert truncated and not terminated and reward == 0.0
        assert "farm.truncated_reason" in info
        env.close()
    finally:
        srv.stop()


def test_stale_socket_of_dead_server_is_replaced(sock_path) -> None:
    address = sock_path("stale")
    first = ServerProcess("toy/text-task", address=address)
    first.start()
    first.kill()
    assert os.path.exists(address[len("unix://") :])  # SIGKILL leaves the file
    with ServerProcess("toy/text-task", address=address) as second:
        _oracle_episode(second.address)
    first.stop()


def test_second_server_on_a_live_socket_is_refused(text_server: ServerProcess) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "farm.cli",
            "serve",
            "toy/text-task",
            "--address",
            text_server.address,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "address in use" in proc.stderr
    _oracle_episode(text_server.address)  # the first server is unaffected


# ---------------------------------------------------------------- reconnect


def test_server_killed_mid_episode_then_back(sock_path) -> None:
    address = sock_path("reconnect")
    srv = ServerProcess("toy/text-task", address=address)
    srv.start()
    env = farm.connect(address, reconnect_timeout_s=20)
    try:
        obs, _ = env.reset(seed=0)
        first = env.step(solve_instruction(obs["instruction"])[0])
        assert not first[2] and not first[3]
        srv.kill()
        obs2, reward, terminated, truncated, info = env.step(0)
        assert truncated is True and terminated is False and reward == 0.0
        assert info["farm.truncated_reason"].startswith("sandbox unavailable")
        assert obs2 == first[0]  # the last observation, never a made-up one
        with pytest.raises(FailedPreconditionError, match="sandbox went away"):
            env.step(0)
        srv.stop()

        with ServerProcess("toy/text-task", address=address) as back:
            obs, info = env.reset(seed=0)
            assert obs["typed"] == "" and info["length"] == len(
                solve_instruction(obs["instruction"])
            )
            for a in solve_instruction(obs["instruction"]):
                obs, reward, terminated, truncated, _ = env.step(a)
            assert reward == 1.0 and terminated
            assert health(back.address).active_sessions == 1
            env.close()
    finally:
        env.close()


def test_server_gone_for_good(sock_path) -> None:
    address = sock_path("gone")
    srv = ServerProcess("toy/text-task", address=address)
    srv.start()
    env = farm.connect(address, reconnect_timeout_s=1.0)
    try:
        env.reset(seed=1)
        srv.kill()
        assert env.step(0)[3] is True
        start = time.monotonic()
        with pytest.raises(SandboxUnavailableError) as info:
            env.reset()
        elapsed = time.monotonic() - start
        message = str(info.value)
        assert "went away" in message and "did not come back within 1 s" in message, message
        assert address in message
        assert elapsed < 5, f"reset kept trying for {elapsed:.1f} s with reconnect_timeout_s=1"
    finally:
        env.close()
        srv.stop()


def test_no_reconnect_raises_instead(sock_path) -> None:
    address = sock_path("noreconnect")
    with ServerProcess("toy/text-task", address=address) as srv:
        env = farm.connect(address, reconnect=False)
        env.reset(seed=0)
        srv.kill()
        with pytest.raises(SandboxUnavailableError):
            env.step(0)
        with pytest.raises(SandboxUnavailableError, match="went away"):
            env.reset()
        env.close()


# ---------------------------------------------------------------- limits, config


def test_max_sessions() -> None:
    with ServerProcess("toy/text-task", args=["--max-sessions", "2"]) as srv:
        a = farm.connect(srv.address)
        b = farm.connect(srv.address)
        with pytest.raises(ResourceExhaustedError, match="limit of 2 sessions"):
            farm.connect(srv.address)
        for env in (a, b):
            obs, _ = env.reset(seed=4)
            obs, *_ = env.step(solve_instruction(obs["instruction"])[0])
            assert len(obs["typed"]) == 1
        assert health(srv.address).active_sessions == 2
        a.close()
        c = farm.connect(srv.address)  # the freed slot can be taken again
        assert c.reset(seed=0)[0]["typed"] == ""
        b.close()
        c.close()


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0", "192.0.2.1:5000", "example.com:1"])
def test_non_loopback_address_refused(address: str) -> None:
    with pytest.raises(ConfigError, match=r"refusing to listen .*--allow-remote"):
        ServerConfig(address=address).validate()
    assert ServerConfig(address=address, allow_remote=True).validate().port is not None


@pytest.mark.parametrize("address", ["127.0.0.1:0", "localhost:0", "[::1]:0", "unix:///tmp/x.sock"])
def test_loopback_addresses_accepted(address: str) -> None:
    ServerConfig(address=address).validate()


def test_cli_refuses_non_loopback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "farm.cli", "serve", "toy/text-task", "--address", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "refusing to listen on '0.0.0.0:0'" in proc.stderr
    assert "--allow-remote" in proc.stderr
    assert "serving" not in proc.stdout


def test_round_trip_values_are_exact_over_the_wire() -> None:
    """Every space kind crosses a real server exactly (observation == what the env made)."""
    made: list = []

    class AllSpaces(gym.Env):
        metadata = {"render_modes": []}

        def __init__(self) -> None:
            self.observation_space = spaces.Dict(
                {
                    "box": spaces.Box(-np.inf, np.inf, (2, 3), np.float64),
                    "scalar": spaces.Box(-1, 1, (), np.float32),
                    "md": spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [-1, 2]]),
                    "mb": spaces.MultiBinary([2, 2]),
                    "text": spaces.Text(8, charset="abc"),
                    "tuple": spaces.Tuple((spaces.Discrete(3, start=5), spaces.Text(4))),
                    "seq": spaces.Sequence(spaces.Discrete(3)),
                    "stack": spaces.Sequence(spaces.Box(0, 1, (2,), np.float32), stack=True),
                    "oneof": spaces.OneOf((spaces.Discrete(2), spaces.MultiBinary(3))),
                }
            )
            self.action_space = spaces.Tuple(
                (spaces.Box(-1, 1, (2,), np.float32), spaces.MultiBinary(2), spaces.Text(3))
            )

        def _obs(self):
            obs = self.observation_space.sample()
            made.append(obs)
            return obs

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.observation_space.seed(seed)
            return self._obs(), {"seed": seed}

        def step(self, action):
            assert self.action_space.contains(action)
            return self._obs(), 0.5, False, False, {"action_text": action[2]}

    with BackgroundServer(AllSpaces) as srv:
        env = farm.connect(srv.address)
        try:
            check_env(env, skip_render_check=True)
            made.clear()
            obs, info = env.reset(seed=11)
            assert info == {"seed": 11}
            assert data_equivalence(obs, made[-1], exact=True)
            env.action_space.seed(3)
            for _ in range(10):
                action = env.action_space.sample()
                obs, reward, *_, info = env.step(action)
                assert data_equivalence(obs, made[-1], exact=True)
                assert reward == 0.5 and info == {"action_text": action[2]}
        finally:
            env.close()


def test_env_kwargs_reach_the_env() -> None:
    kwargs = json.dumps({"modes": ["reverse"], "words": ["zebra"]})
    with ServerProcess("toy/text-task", env_kwargs=kwargs) as srv:
        env = farm.connect(srv.address)
        try:
            obs, info = env.reset(seed=0)
            assert obs["instruction"] == 'Type the word "zebra" backwards, one letter per step.'
            assert info == {"mode": "reverse", "length": 5}
        finally:
            env.close()
