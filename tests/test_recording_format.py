"""The episode store: format round-trip, crash tolerance, bad input, index, CLI, export.

In-process toy envs (``toy/text-task``, ``toy/pixels``) wrapped by the recorder;
the ``farm episodes`` and ``farm replay`` commands run through ``farm.cli.main``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sqlite3
from typing import Any

import numpy as np
import pytest

from farm.cli import main as cli
from farm.recording import (
    CorruptEpisodeError,
    Episode,
    EpisodeFilter,
    EpisodeNotFoundError,
    EpisodeStore,
    MissingFrameError,
    RecordingConfig,
    ReplayError,
    record,
)
from farm.recording import format as F
from farm.recording.replay import replay
from farm.registry import make


def play_text_task(root: str, seed: int, *, steps: int | None = None, job: str | None = None):
    """One toy/text-task episode, spelled correctly (success) unless cut at ``steps``."""
    env = record(make("toy/text-task"), RecordingConfig(root=root, env_id="toy/text-task", job=job))
    obs, info = env.reset(seed=seed)
    episode_id = info["farm.recording.episode"]
    word = obs["instruction"].split('"')[1]
    if "backwards" in obs["instruction"]:
        word = word[::-1]
    actions = [ord(c) - ord("a") for c in word]
    for n, a in enumerate(actions):
        if steps is not None and n >= steps:
            break
        env.annotate_next(policy_version=7, model_output=f"letter {a}")
        obs, _reward, terminated, truncated, info = env.step(a)
        env.annotate(logprobs=[-0.5, -0.25])
        if terminated or truncated:
            break
    env.close()
    return os.path.join(root, episode_id), actions


def test_round_trip_text_task(tmp_path: Any) -> None:
    path, actions = play_text_task(str(tmp_path), seed=4, job="job-a")
    ep = Episode(path)
    assert ep.complete and ep.outcome == "success" and not ep.torn_tail
    assert ep.meta.env_id == "toy/text-task" and ep.meta.seed == 4 and ep.meta.job == "job-a"
    assert ep.meta.versions["farm"] and ep.meta.versions["gymnasium"]
    assert ep.num_steps == len(actions)
    assert [ep.action(i) for i in range(1, ep.num_steps + 1)] == actions
    assert ep.total_reward == 1.0
    # the recorded observations are those a fresh env with the same seed produces
    env = make("toy/text-task")
    obs, _ = env.reset(seed=4)
    assert ep.observation(0) == obs
    for i, a in enumerate(actions, 1):
        obs, *_ = env.step(a)
        assert ep.observation(i) == obs
    # both kinds of annotations are attached to their steps
    for i in range(1, ep.num_steps + 1):
        assert ep.steps[i].annotations == {
            "policy_version": 7,
            "model_output": f"letter {actions[i - 1]}",
            "logprobs": [-0.5, -0.25],
        }
    # spaces are recorded exactly
    assert F.space_from_b64(ep.meta.observation_space) == env.observation_space
    assert F.space_from_b64(ep.meta.action_space) == env.action_space


def test_round_trip_pixels_frames_deduplicated(tmp_path: Any) -> None:
    env = record(make("toy/pixels"), RecordingConfig(root=str(tmp_path), env_id="toy/pixels"))
    obs0, info = env.reset(seed=2)
    observed = [obs0]
    for _ in range(3):
        obs, *_ = env.step(env.action_space.sample())
        observed.append(obs)
    env.close()
    ep = Episode(os.path.join(str(tmp_path), info["farm.recording.episode"]))
    assert ep.outcome == "abandoned" and ep.complete  # closed mid-episode
    for i, obs in enumerate(observed):
        np.testing.assert_array_equal(ep.observation(i), obs)
    files = os.listdir(os.path.join(ep.path, F.FRAMES_DIR))
    distinct = {F.frame_hash(o) for o in observed}
    assert sorted(files) == sorted(h + ".png" for h in distinct)


def test_same_frame_written_once(tmp_path: Any) -> None:
    """Identical screenshots are stored once (content-addressed)."""
    import gymnasium as gym

    class Still(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (32, 48, 3), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.full((32, 48, 3), 7, np.uint8), {}

        def step(self, action):
            return np.full((32, 48, 3), 7, np.uint8), 0.0, action == 1, False, {}

    env = record(Still(), RecordingConfig(root=str(tmp_path), env_id="test/still"))
    _, info = env.reset(seed=0)
    for a in (0, 0, 0, 1):
        env.step(a)
    env.close()
    ep = Episode(os.path.join(str(tmp_path), info["farm.recording.episode"]))
    assert ep.num_steps == 4 and ep.outcome == "failure"
    assert len(os.listdir(os.path.join(ep.path, F.FRAMES_DIR))) == 1


def test_torn_last_line_is_ignored(tmp_path: Any) -> None:
    path, _ = play_text_task(str(tmp_path), seed=1, steps=2)
    steps_file = os.path.join(path, F.STEPS_FILE)
    with open(steps_file, "rb") as f:
        lines = f.read().split(b"\n")[:-1]
    # the episode as a crash would leave it: no end record, a half-written step
    records = [json.loads(x) for x in lines]
    kept = [x for x in lines if json.loads(x)["type"] in ("reset", "step")][:2]
    with open(steps_file, "wb") as f:
        f.write(b"\n".join(kept) + b"\n" + lines[2][: len(lines[2]) // 2])
    ep = Episode(path)
    assert ep.torn_tail and not ep.complete and ep.outcome == "incomplete"
    assert ep.num_steps == 1
    assert ep.steps[1].action == records[1]["action"]


def test_garbled_middle_line_is_a_clear_error(tmp_path: Any) -> None:
    path, _ = play_text_task(str(tmp_path), seed=1)
    steps_file = os.path.join(path, F.STEPS_FILE)
    with open(steps_file, "rb") as f:
        lines = f.read().split(b"\n")
    lines[1] = b'{"type": "step", "i": 1, "act'
    with open(steps_file, "wb") as f:
        f.write(b"\n".join(lines))
    with pytest.raises(CorruptEpisodeError, match="line 2 is not a valid record"):
        Episode(path)


def test_missing_and_truncated_directories(tmp_path: Any) -> None:
    with pytest.raises(EpisodeNotFoundError, match="no episode directory"):
        Episode(str(tmp_path / "nope"))
    path, _ = play_text_task(str(tmp_path), seed=2)
    os.unlink(os.path.join(path, F.STEPS_FILE))
    with pytest.raises(CorruptEpisodeError, match=r"truncated: steps.jsonl is missing"):
        Episode(path)
    path2, _ = play_text_task(str(tmp_path), seed=3)
    os.unlink(os.path.join(path2, F.META_FILE))
    with pytest.raises(CorruptEpisodeError, match=r"episode\.json is missing"):
        Episode(path2)
    with pytest.raises(EpisodeNotFoundError, match="no episode 'zzz'"):
        EpisodeStore(str(tmp_path)).open("zzz")
    # the store lists both damaged directories as corrupt instead of failing
    rows = EpisodeStore(str(tmp_path)).list()
    assert sorted(r["outcome"] for r in rows) == ["corrupt", "corrupt"]
    assert all(r["error"] for r in rows)


def test_missing_frame_is_a_clear_error(tmp_path: Any) -> None:
    env = record(make("toy/pixels"), RecordingConfig(root=str(tmp_path), env_id="toy/pixels"))
    _, info = env.reset(seed=0)
    env.step(env.action_space.sample())
    env.close()
    ep = Episode(os.path.join(str(tmp_path), info["farm.recording.episode"]))
    victim = ep.frame_refs(1)[0]
    os.unlink(F.frame_path(ep.path, victim))
    ep = Episode(ep.path)  # the metadata and steps still read
    assert ep.missing_frames() == [(1, victim)]
    missing = rf"{victim}\.png is missing \(referenced by step 1\)"
    with pytest.raises(MissingFrameError, match=missing):
        ep.observation(1)
    with pytest.raises(ReplayError, match="1 frame file\\(s\\) missing"):
        replay(ep)


def test_index_filters_and_staleness(tmp_path: Any) -> None:
    root = str(tmp_path)
    a, _ = play_text_task(root, seed=1, job="alpha")
    b, _ = play_text_task(root, seed=2, steps=1, job="beta")  # closed early: abandoned
    store = EpisodeStore(root)
    assert {r["episode_id"] for r in store.list()} == {os.path.basename(a), os.path.basename(b)}
    assert [r["seed"] for r in store.list(EpisodeFilter(outcome="success"))] == [1]
    assert [r["seed"] for r in store.list(EpisodeFilter(job="be*"))] == [2]
    assert store.list(EpisodeFilter(task="toy/*", limit=1))[0]["seed"] == 1
    assert store.list(EpisodeFilter(task="miniwob/*")) == []
    assert len(store.list(EpisodeFilter(since="2000-01-01", until="2999"))) == 2
    assert store.list(EpisodeFilter(until="2000-01-01")) == []
    assert os.path.exists(os.path.join(root, F.INDEX_FILE))
    # stale: an episode's files change after indexing -> re-read on the next query
    with open(os.path.join(b, F.STEPS_FILE), "rb") as f:
        lines = f.read().split(b"\n")
    with open(os.path.join(b, F.STEPS_FILE), "wb") as f:
        f.write(b"\n".join(x for x in lines if b'"end"' not in x))
    assert {r["seed"]: r["outcome"] for r in store.list()}[2] == "incomplete"
    # deleted directory -> row dropped; corrupt index file -> rebuilt
    shutil.rmtree(b)
    assert [r["seed"] for r in store.list()] == [1]
    store.close()
    with open(os.path.join(root, F.INDEX_FILE), "wb") as f:
        f.write(b"this is not a database" * 100)
    assert [r["seed"] for r in EpisodeStore(root).list()] == [1]
    with sqlite3.connect(os.path.join(root, F.INDEX_FILE)) as db:
        assert db.execute("SELECT count(*) FROM episodes").fetchone()[0] == 1


def test_cli_episodes_ls_show_rm(tmp_path: Any, capsys: Any) -> None:
    root = str(tmp_path)
    a, _ = play_text_task(root, seed=5, job="j1")
    b, _ = play_text_task(root, seed=6, steps=1, job="j2")
    assert cli(["episodes", "ls", "--store", root, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["seed"] for r in rows} == {5, 6}
    assert cli(["episodes", "ls", "--store", root, "--json", "--outcome", "abandoned"]) == 0
    assert [r["seed"] for r in json.loads(capsys.readouterr().out)] == [6]
    assert cli(["episodes", "ls", "--store", root, "--job", "j1"]) == 0
    out = capsys.readouterr().out
    assert "1 episodes" in out and "success" in out
    ida = os.path.basename(a)
    assert cli(["episodes", "show", "--store", root, ida[-8:], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["episode_id"] == ida and shown["outcome"] == "success"
    assert shown["steps_detail"][1]["annotations"]["policy_version"] == 7
    assert cli(["episodes", "show", "--store", root, ida]) == 0
    assert "success" in capsys.readouterr().out
    assert cli(["episodes", "show", "--store", root, "no-such-episode"]) == 2
    assert "no episode 'no-such-episode'" in capsys.readouterr().err
    assert cli(["episodes", "rm", "--store", root, ida]) == 0
    assert f"removed {a}" in capsys.readouterr().out
    assert not os.path.exists(a) and os.path.exists(b)
    assert cli(["episodes", "ls", "--store", root, "--json"]) == 0
    assert [r["seed"] for r in json.loads(capsys.readouterr().out)] == [6]


def test_replay_toy_reproduces_and_detects_tampering(tmp_path: Any, capsys: Any) -> None:
    path, _ = play_text_task(str(tmp_path), seed=8)
    report = replay(Episode(path))
    assert report.reproduced and len(report.steps) == Episode(path).num_steps + 1
    assert cli(["replay", path]) == 0
    assert "reproduced" in capsys.readouterr().out
    # change a recorded reward: the replay reports the step and fails
    steps_file = os.path.join(path, F.STEPS_FILE)
    with open(steps_file) as f:
        recs = [json.loads(x) for x in f]
    last = max(i for i, r in enumerate(recs) if r["type"] == "step")
    recs[last]["reward"] = 0.5
    with open(steps_file, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs))
    report = replay(Episode(path))
    assert not report.reproduced and report.first_divergence == recs[last]["i"]
    assert cli(["replay", path, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["reproduced"] is False


def test_replay_of_unknown_env_kind(tmp_path: Any, capsys: Any) -> None:
    path, _ = play_text_task(str(tmp_path), seed=1)
    meta_file = os.path.join(path, F.META_FILE)
    with open(meta_file) as f:
        meta = json.load(f)
    meta["env_id"] = "holodeck/bridge"  # a namespace farm does not have
    with open(meta_file, "w") as f:
        json.dump(meta, f)
    assert cli(["replay", path]) == 2
    err = capsys.readouterr().err
    assert "recorded from env 'holodeck/bridge', which this farm cannot make" in err


@pytest.mark.parametrize("frames", ["ref", "inline"])
def test_export_parquet_read_back(tmp_path: Any, frames: str, capsys: Any) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    root = str(tmp_path / "store")
    _p1, a1 = play_text_task(root, seed=1)
    env = record(make("toy/pixels"), RecordingConfig(root=root, env_id="toy/pixels"))
    obs0, _info = env.reset(seed=0)
    obs1, *_ = env.step(1)
    env.close()
    out = str(tmp_path / "out")
    args = ["episodes", "export", "--store", root, "--out", out, "--frames", frames]
    assert cli([*args, "--shard-rows", "3"]) == 0
    shards = sorted(os.listdir(out))
    n_rows = (len(a1) + 1) + 2
    assert len(shards) == -(-n_rows // 3) and all(s.endswith(".parquet") for s in shards)
    table = pq.read_table(out)  # the directory as one dataset
    assert table.num_rows == n_rows
    rows = table.to_pylist()
    text_rows = [r for r in rows if r["env_id"] == "toy/text-task"]
    assert [r["step"] for r in text_rows] == list(range(len(a1) + 1))
    assert [int(r["action"]) for r in text_rows[1:]] == a1
    assert text_rows[-1]["terminated"] and text_rows[-1]["reward"] == 1.0
    assert json.loads(text_rows[1]["annotations_json"])["policy_version"] == 7
    pix = [r for r in rows if r["env_id"] == "toy/pixels"]
    from farm.recording.frames import decode_png

    for r, obs in zip(pix, (obs0, obs1), strict=True):
        if frames == "ref":
            with open(r["frame_path"], "rb") as f:
                data = f.read()
        else:
            data = r["frame_png"]
        np.testing.assert_array_equal(decode_png(data), obs)
    if importlib.util.find_spec("datasets") is not None:
        import datasets

        ds = datasets.load_dataset(
            "parquet", data_files=sorted(os.path.join(out, s) for s in shards), split="train"
        )
        assert ds.num_rows == n_rows and "reward" in ds.column_names


def test_export_without_pyarrow_names_the_extra(tmp_path: Any, monkeypatch: Any) -> None:
    import builtins

    from farm.errors import MissingExtraError
    from farm.recording.export import export_parquet

    real_import = builtins.__import__

    def no_pyarrow(name: str, *args: Any, **kw: Any) -> Any:
        if name.startswith("pyarrow"):
            raise ImportError("No module named 'pyarrow'")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(MissingExtraError, match=r"pip install 'farm\[export\]'"):
        export_parquet([], str(tmp_path))
