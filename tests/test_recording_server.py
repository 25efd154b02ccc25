"""``farm serve --record``: crash consistency, a disk that fills up, the replay env.

Real ``farm serve`` child processes on unix sockets; toy envs only.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from typing import Any

import pytest
from helpers import health, wait_until

import farm
from farm.recording import Episode, EpisodeStore, FileOps, RecordingConfig, recording_factory
from farm.recording import format as F
from farm.recording.replay import replay
from farm.recording.replay_env import DIVERGENCE_KEY, MATCH_KEY, ReplayEnv
from farm.registry import resolve
from farm.server import BackgroundServer
from farm.server.process import ServerProcess

ERROR_KEY = "farm.recording.error"
EPISODE_KEY = "farm.recording.episode"


def letters(obs: dict[str, str]) -> list[int]:
    word = obs["instruction"].split('"')[1]
    if "backwards" in obs["instruction"]:
        word = word[::-1]
    return [ord(c) - ord("a") for c in word]


def lines_of(path: str) -> int:
    try:
        with open(os.path.join(path, F.STEPS_FILE), "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def test_sigkill_mid_episode_leaves_a_readable_incomplete_episode(
    tmp_path: Any, sock_path: Any
) -> None:
    root = str(tmp_path / "store")
    srv = ServerProcess("toy/text-task", address=sock_path("rec"), args=["--record", root])
    srv.start()
    try:
        env = farm.connect(srv.address)
        # a complete episode first
        obs, info = env.reset(seed=11)
        done_id = info[EPISODE_KEY]
        for a in letters(obs):
            obs, reward, terminated, _truncated, info = env.step(a)
        assert terminated and reward == 1.0
        # then one cut short: two correct letters, then the server is killed
        obs, info = env.reset(seed=12)
        cut_id = info[EPISODE_KEY]
        plan = letters(obs)
        assert len(plan) >= 3
        for a in plan[:2]:
            env.step(a)
        cut = os.path.join(root, cut_id)
        wait_until(lambda: lines_of(cut) == 3)  # reset + 2 steps are on disk
        srv.kill()
    finally:
        srv.stop()
    done = Episode(os.path.join(root, done_id))
    assert done.complete and done.outcome == "success" and done.num_steps == len(done.steps) - 1
    partial = Episode(cut)
    assert not partial.complete and partial.outcome == "incomplete"
    assert partial.num_steps == 2 and [partial.action(i) for i in (1, 2)] == plan[:2]
    assert partial.meta.seed == 12 and partial.meta.env_id == "toy/text-task"
    rows = {r["episode_id"]: r for r in EpisodeStore(root).list()}
    assert rows[done_id]["outcome"] == "success" and rows[cut_id]["outcome"] == "incomplete"
    # both replay: the complete one fully, the partial one up to its last step
    assert replay(done).reproduced
    report = replay(partial)
    assert report.reproduced and not report.complete and len(report.steps) == 3


@pytest.fixture
def tiny_disk(tmp_path: Any) -> Any:
    """A real 1 MiB tmpfs (needs root and mount); skipped where it cannot be mounted."""
    mnt = str(tmp_path / "tiny")
    os.makedirs(mnt)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); see the injected test")
    yield mnt
    subprocess.run(["umount", "-l", mnt], check=False)


def test_real_disk_full_keeps_serving(tiny_disk: str, sock_path: Any) -> None:
    """A 1 MiB tmpfs fills up while recording noise frames: the env keeps serving."""
    root = os.path.join(tiny_disk, "store")
    kwargs = json.dumps({"height": 64, "width": 96, "episode_length": 8})
    srv = ServerProcess(
        "toy/pixels", address=sock_path("full"), args=["--record", root], env_kwargs=kwargs
    )
    srv.start()
    try:
        env = farm.connect(srv.address)
        _, info = env.reset(seed=0)
        first = info[EPISODE_KEY]
        for _ in range(8):
            *_, truncated, info = env.step(1)
        assert truncated
        wait_until(lambda: Episode(os.path.join(root, first)).complete)
        errors: list[str] = []
        for episode in range(200):  # each frame is ~18 KiB of noise: the disk fills
            _, info = env.reset(seed=episode + 1)
            errors += [info[ERROR_KEY]] if ERROR_KEY in info else []
            for _ in range(8):
                *_, info = env.step(episode % 4)
                errors += [info[ERROR_KEY]] if ERROR_KEY in info else []
            if errors:
                break
        assert errors, "the disk never filled up"
        assert "No space left on device" in errors[0], errors[0]
        # still serving: more episodes and steps work, with correct observations
        _obs, _ = env.reset(seed=99)
        obs2, *_ = env.step(0)
        assert obs2.shape == (64, 96, 3)
        assert health(srv.address).status == 1  # SERVING
        env.close()
    finally:
        assert srv.stop() == 0
    assert "Traceback" not in srv.output()
    # the first (earlier) episode is intact; the one that hit the full disk reads as
    # incomplete, up to its last complete step
    ep = Episode(os.path.join(root, first))
    assert ep.complete and ep.num_steps == 8 and not ep.missing_frames()
    assert replay(ep).reproduced
    rows = EpisodeStore(root).list()
    assert "incomplete" in {r["outcome"] for r in rows}
    for r in rows:
        if r["outcome"] != "corrupt":
            assert not Episode(r["path"]).missing_frames()


class FailingOps(FileOps):
    """INJECTED failure: ``write`` of ``steps.jsonl`` raises ENOSPC once, after N lines."""

    def __init__(self, fail_after_lines: int) -> None:
        self.left = fail_after_lines
        self.failed = 0

    def write(self, fd: int, data: Any) -> int:
        if bytes(data[:8]).startswith(b'{"type"'):
            if self.left == 0 and not self.failed:
                self.failed += 1
                os.write(fd, bytes(data[: len(data) // 2]))  # a torn half line first
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            self.left -= 1
        return os.write(fd, data)


def test_injected_enospc_stops_that_episode_only(tmp_path: Any, sock_path: Any) -> None:
    root = str(tmp_path / "store")
    ops = FailingOps(fail_after_lines=3)  # reset + 2 steps, then the 3rd step fails
    cfg = RecordingConfig(root=root, env_id="toy/text-task", ops=ops)
    with BackgroundServer(
        recording_factory(resolve("toy/text-task"), cfg), address_config(sock_path("inj"))
    ) as srv:
        env = farm.connect(srv.address)
        obs, info = env.reset(seed=3)
        broken = info[EPISODE_KEY]
        seen = []
        plan = letters(obs)
        for a in plan:
            obs, reward, terminated, _truncated, info = env.step(a)
            seen.append(info.get(ERROR_KEY))
        assert terminated and reward == 1.0  # the episode itself went on normally
        wait_until(lambda: ops.failed)  # the writer works in the background
        obs, info = env.reset(seed=4)  # so the next call reports the error at the latest
        seen.append(info.get(ERROR_KEY))
        reports = [s for s in seen if s]
        assert len(reports) == 1 and "(injected)" in reports[0] and broken in reports[0]
        good = info[EPISODE_KEY]
        for a in letters(obs):
            env.step(a)
        env.close()
    assert ops.failed == 1
    ep = Episode(os.path.join(root, broken))
    assert not ep.complete and ep.num_steps == 2 and not ep.torn_tail  # torn line cut back
    ep2 = Episode(os.path.join(root, good))
    assert ep2.complete and ep2.outcome == "success"


def address_config(address: str) -> Any:
    from farm.server import ServerConfig

    return ServerConfig(address=address)


def test_replay_env_served_follows_and_diverges(tmp_path: Any, sock_path: Any) -> None:
    root = str(tmp_path / "store")
    srv = ServerProcess("toy/text-task", address=sock_path("src"), args=["--record", root])
    with srv:
        env = farm.connect(srv.address)
        obs, info = env.reset(seed=21)
        ep_id = info[EPISODE_KEY]
        plan = letters(obs)
        recorded = [env.step(a) for a in plan]
        env.close()
    path = os.path.join(root, ep_id)
    wait_until(lambda: Episode(path).complete)
    kwargs = json.dumps({"episode": path})
    with ServerProcess(
        "farm.recording.replay_env:ReplayEnv", address=sock_path("rep"), env_kwargs=kwargs
    ) as rep:
        env = farm.connect(rep.address)
        assert env.action_space == farm.registry.make("toy/text-task").action_space
        # following the recording: the recorded observations, rewards and end
        obs, info = env.reset()
        assert info["farm.replay.episode"] == ep_id
        for a, (r_obs, r_reward, r_term, r_trunc, _) in zip(plan, recorded, strict=True):
            obs, reward, terminated, truncated, info = env.step(a)
            assert info[MATCH_KEY] is True
            assert (obs, reward, terminated, truncated) == (r_obs, r_reward, r_term, r_trunc)
        assert terminated
        # diverging: another letter at step 2 truncates, with the reason in info
        obs, info = env.reset()
        env.step(plan[0])
        wrong = (plan[1] + 1) % 26
        _obs2, reward, terminated, truncated, info = env.step(wrong)
        assert truncated and not terminated and reward == 0.0
        assert info[MATCH_KEY] is False
        assert info[DIVERGENCE_KEY] == {"step": 2, "expected": str(plan[1]), "got": str(wrong)}
        env.close()
    # on_divergence="follow": the env shows what the recording did next
    follow = ReplayEnv(path, on_divergence="follow")
    follow.reset()
    total = 0.0
    for _ in plan:
        obs, reward, terminated, truncated, info = follow.step(25 if plan[0] != 25 else 0)
        total += reward
        assert info[MATCH_KEY] is False and DIVERGENCE_KEY in info
    assert terminated and total == 1.0 and obs == recorded[-1][0]


def test_replay_env_from_a_store_cycles_episodes(tmp_path: Any) -> None:
    from farm.recording import record
    from farm.registry import make

    root = str(tmp_path)
    ids = []
    for seed in (1, 2):
        env = record(make("toy/text-task"), RecordingConfig(root=root, env_id="toy/text-task"))
        obs, info = env.reset(seed=seed)
        ids.append(info[EPISODE_KEY])
        for a in letters(obs):
            env.step(a)
        env.close()
    renv = ReplayEnv(store=root, task="toy/*", outcome="success")
    assert [renv.reset()[1]["farm.replay.episode"] for _ in range(3)] == [*ids, ids[0]]
    _, info = renv.reset(options={"episode": ids[1]})
    assert info["farm.replay.episode"] == ids[1]
    with pytest.raises(farm.errors.ConfigError, match="no recorded episodes match"):
        ReplayEnv(store=root, task="miniwob/*")
