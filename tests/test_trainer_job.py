"""Training jobs end to end on ``toy/gui`` sandboxes: in-process, leased from a real
farm (local backend, gRPC), through ``farm submit`` (resume after SIGKILL), and on a
real local Ray cluster; bad specs, dying sandboxes, garbled actions, NaN losses."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("torch", reason="needs torch (pip install farm[train])")

from farm.recording.store import EpisodeStore
from trainer.api.spec import JobSpec, parse_spec
from trainer.errors import JobSpecError, TrainingDivergedError
from trainer.infra import checkpoint
from trainer.infra.job import Job
from trainer.infra.metrics import read

pytestmark = pytest.mark.train

BASE: dict[str, Any] = {
    "name": "toy",
    "sandboxes": {
        "source": "inprocess",
        "kind": "toy",
        "env": "toy/gui",
        "count": 12,
        "env_kwargs": {"width": 160, "height": 210},
    },
    "tasks": {
        "train": ["click-button", "click-tab", "focus-text"],
        "infeasible": ["click-button-infeasible"],
        "eval": {"episodes_per_task": 10, "every_s": 0},
    },
    "algorithm": {
        "group_size": 4,
        "redundancy": 1,
        "eta": 2,
        "batch_groups": 2,
        "max_steps": 5,
        "group_seeds": "distinct",
    },
    "curriculum": {"infeasible_share": 0.2},
    # learning these takes ~30 steps; once mastered, groups lose reward variance and are
    # dropped, so the learner starves: the minutes bound ends a job that got there
    "budget": {"learner_steps": 30, "minutes": 1.0},
    "checkpoint": {"every_steps": 10},
}


def spec_of(tmp_path: Path, **over: Any) -> JobSpec:
    data = copy.deepcopy(BASE)
    for key, value in over.items():
        node = data
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    data.setdefault("run_dir", str(tmp_path / "run"))
    return parse_spec(data)


def train_records(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in read(run_dir / "metrics.jsonl") if r["kind"] == "train"]


# ---------------------------------------------------------------- learning and invariants


def test_async_job_learns_and_keeps_its_invariants(tmp_path: Path) -> None:
    spec = spec_of(tmp_path)
    result = Job(spec, progress=False).run()
    run = Path(spec.run_dir or "")
    assert result.evals[0]["label"] == "start" and result.evals[0]["success"] <= 0.4
    assert result.final_success is not None and result.final_success >= 0.8, result.evals
    records = train_records(run)
    assert len(records) == result.version >= 20 and records[-1]["version"] == result.version
    # staleness within eta at every step, and async: some groups were trained stale
    assert all(r["staleness_max"] <= 2 for r in records)
    hist = records[-1]["staleness_hist"]
    assert sum(v for k, v in hist.items() if int(k) > 0) > 0, hist
    # zero-variance groups never reach the learner (while some were dropped)
    assert all(r["zero_variance_groups"] == 0 for r in records)
    assert records[-1]["zero_variance_dropped"] > 0
    # behaviour vs proximal log-probs: fresh agree, stale moved
    assert max(r.get("logprob_gap_fresh_max", 0.0) for r in records) < 1e-3
    assert max(r.get("logprob_gap_stale_max", 0.0) for r in records) > 0
    # STEPO keeps every batch balanced
    assert all(abs(r["weighted_advantage_sum"]) < 1e-4 for r in records)
    # the infeasible share stays within its bound; the curriculum is logged
    cur = records[-1]["curriculum"]
    assert cur["infeasible_share"] <= 0.2 + 1e-9 and "click-tab" in cur["pass_rate"]
    # outputs: learning curve, TensorBoard, checkpoints, recorded episodes
    assert (run / "learning_curve.png").stat().st_size > 10_000
    assert any((run / "tensorboard").iterdir())
    assert checkpoint.latest(run) is not None
    store = EpisodeStore(str(run / "episodes"))
    episodes = store.list()
    assert len(episodes) > 100
    ep = store.open(episodes[-1]["episode_id"])
    annotated = [s.annotations for s in ep.steps if s.annotations]
    assert annotated and "policy_version" in annotated[0] and "logprob" in annotated[0]
    store.close()


def test_eta_zero_trains_on_policy(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path, **{"algorithm.eta": 0, "budget": {"learner_steps": 8}, "record": False}
    )
    Job(spec, progress=False).run()
    records = train_records(Path(spec.run_dir or ""))
    assert records[-1]["staleness_hist"] == {"0": 16}
    assert all("logprob_gap_stale_max" not in r for r in records)


# ---------------------------------------------------------------- bad specs


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"algorithm.learning_rate": 1}, "algorithm.learning_rate: unknown key"),
        ({"algorithm.eta": -1}, "algorithm.eta: Input should be greater than or equal to 0"),
        ({"algorithm.group_size": 1}, "algorithm.group_size"),
        ({"tasks.train": ["click-buton"]}, "no task 'click-buton' in toy/gui"),
        ({"budget": {}}, "set at least one of minutes, learner_steps, samples"),
        ({"policy.name": "nope"}, "policy.name: unknown policy 'nope'"),
    ],
)
def test_bad_specs_fail_before_anything_starts(tmp_path: Path, over: dict, message: str) -> None:
    with pytest.raises(JobSpecError, match=message.replace("(", r"\(")):
        Job(spec_of(tmp_path, **over), progress=False)
    assert not (tmp_path / "run").exists()


def test_farm_submit_reports_a_bad_spec(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({**BASE, "algorithm": {"eta": -2}}))
    proc = subprocess.run(
        [sys.executable, "-m", "farm.cli", "submit", str(job)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "algorithm.eta" in proc.stderr and "greater than or equal to 0" in proc.stderr


# ---------------------------------------------------------------- farm sandboxes


@pytest.fixture
def toy_farm(tmp_path_factory: pytest.TempPathFactory):
    from orchestration.runtime import BackgroundController
    from orchestration.spec import parse_spec as parse_farm_spec

    state = tmp_path_factory.mktemp("farm")
    spec = parse_farm_spec(
        {
            "state_dir": str(state),
            "control": {"metrics_port": None},
            "restart": {"backoff_s": 0.1},
            "sandboxes": [
                {
                    "kind": "toy",
                    "env": "toy/gui",
                    "count": 2,
                    "env_kwargs": {
                        "width": 160,
                        "height": 210,
                        "step_latency": {"dist": "constant", "median_s": 0.02},
                    },
                }
            ],
        }
    )
    with BackgroundController(spec) as bg:
        bg.wait_healthy(60)
        yield bg


def test_more_sandboxes_than_the_farm_has_is_refused(tmp_path: Path, toy_farm: Any) -> None:
    spec = spec_of(
        tmp_path,
        **{"sandboxes.source": "farm", "sandboxes.farm": toy_farm.address, "sandboxes.count": 3},
    )
    with pytest.raises(JobSpecError, match="asks for 3 sandboxes of toy/gui, but the farm"):
        Job(spec, progress=False).run()


def test_job_on_farm_sandboxes_carries_on_when_one_dies(tmp_path: Path, toy_farm: Any) -> None:
    spec = spec_of(
        tmp_path,
        **{
            "sandboxes.source": "farm",
            "sandboxes.farm": toy_farm.address,
            "sandboxes.count": 2,
            "budget": {"learner_steps": 12},
            "tasks.eval.episodes_per_task": 3,
        },
    )
    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not killed:
            leased = [s for s in toy_farm.status().sandboxes if s.state == "leased" and s.pid]
            if leased and (Path(spec.run_dir or "") / "metrics.jsonl").exists():
                os.kill(leased[0].pid, signal.SIGKILL)
                killed.append(leased[0].pid)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_one)
    killer.start()
    result = Job(spec, progress=False).run()
    killer.join()
    assert killed, "no leased sandbox to kill"
    assert result.version == 12
    last = train_records(Path(spec.run_dir or ""))[-1]
    # the cut episode was discarded (never trained on) and its sandbox replaced
    assert last["infra_cut"] >= 1 and last["sandboxes_replaced"] >= 1


def test_actions_outside_the_action_space_do_not_cost_a_sandbox(
    tmp_path: Path, toy_farm: Any
) -> None:
    spec = spec_of(
        tmp_path,
        **{
            "policy.name": "trainer_policies:OffCharsetPolicy",
            "sandboxes.source": "farm",
            "sandboxes.farm": toy_farm.address,
            "sandboxes.count": 2,
            "budget": {"learner_steps": 3, "minutes": 2},
            "tasks.eval.episodes_per_task": 2,
        },
    )
    result = Job(spec, progress=False).run()
    assert result.version == 3
    last = train_records(Path(spec.run_dir or ""))[-1]
    # the server refused those actions (INVALID_ARGUMENT), the session lived on
    assert last["sandboxes_replaced"] == 0 and last["infra_cut"] == 0


# ---------------------------------------------------------------- misbehaving policies


def test_garbled_actions_are_noops_and_the_job_carries_on(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path,
        **{"policy.name": "trainer_policies:GarblingPolicy", "budget": {"learner_steps": 6}},
    )
    result = Job(spec, progress=False).run()
    assert result.version == 6
    store = EpisodeStore(str(Path(spec.run_dir or "") / "episodes"))
    errors = [
        s.info.get("action_error")
        for e in store.list()[:50]
        for s in store.open(e["episode_id"]).steps
        if s.info.get("action_error")
    ]
    store.close()
    assert errors and "clck" in errors[0]


def test_nan_losses_stop_the_job_with_a_clear_message_and_a_valid_checkpoint(
    tmp_path: Path,
) -> None:
    spec = spec_of(
        tmp_path,
        **{
            "policy.name": "trainer_policies:NaNPolicy",
            "policy.kwargs": {"nan_from": 4},
            "algorithm.max_nonfinite": 3,
            "checkpoint.every_steps": 2,
            "record": False,
        },
    )
    with pytest.raises(TrainingDivergedError, match=r"non-finite losss? in a row"):
        Job(spec, progress=False).run()
    run = Path(spec.run_dir or "")
    state = checkpoint.load(checkpoint.latest(run))
    import torch

    weights = state["learner"]["weights"]
    assert all(torch.isfinite(w).all() for w in weights.values())
    assert state["learner"]["version"] >= 4


# ---------------------------------------------------------------- resume after SIGKILL


def test_resume_after_sigkill_continues_version_curriculum_and_accounting(tmp_path: Path) -> None:
    run = tmp_path / "run"
    data = copy.deepcopy(BASE)
    data["run_dir"] = str(run)
    data["sandboxes"]["env_kwargs"]["step_latency"] = {"dist": "constant", "median_s": 0.01}
    data["budget"] = {"learner_steps": 24}
    data["checkpoint"] = {"every_steps": 4}
    data["tasks"]["eval"]["at_start"] = False
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(data))
    cmd = [sys.executable, "-m", "farm.cli", "submit", "--no-progress"]
    proc = subprocess.Popen([*cmd, str(job)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pointer = run / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if pointer.exists() and json.loads(pointer.read_text())["step"] >= 8:
            break
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    saved = checkpoint.load(checkpoint.latest(run))
    k = saved["learner"]["version"]
    assert 8 <= k < 24
    groups_at_kill = saved["curriculum"]["n_groups"]

    out = subprocess.run([*cmd, "--json", "--resume", str(run)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["resumed_from"] == k and result["version"] == 24
    versions = [r["version"] for r in train_records(run)]
    assert versions[:k] == list(range(1, k + 1))  # before the kill (maybe a few more)
    after = versions[versions.index(k, k - 1) + 1 :] if versions.count(k) > 1 else versions[k:]
    # the resumed run picks up at k + 1 (steps after the last checkpoint were redone)
    assert after[-1] == 24 and k + 1 in versions[k:]
    final = checkpoint.load(checkpoint.latest(run))
    assert final["curriculum"]["n_groups"] > groups_at_kill
    assert final["staleness"]["next_step"] == 24
    assert sum(final["counters"]["staleness"].values()) == 24 * 2  # groups trained, all of them


# ---------------------------------------------------------------- Ray


@pytest.mark.ray
def test_job_runs_on_a_local_ray_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    from orchestration.backends.ray import start_loopback_node, stop_cluster

    temp = Path("/tmp") / f"rayjob{os.getpid()}"
    start_loopback_node("--head", "--port=0", f"--temp-dir={temp}", "--num-cpus=2", head=True)
    try:
        address = (temp / "ray_current_cluster").read_text().strip()
        monkeypatch.setenv("RAY_ADDRESS", address)
        spec = spec_of(tmp_path, **{"runtime": "ray", "budget": {"learner_steps": 6}})
        from trainer.infra.runner import submit

        result = submit(spec, run_dir=tmp_path / "run", progress=False)
        assert result.runtime.startswith("ray (worker pid ")
        assert int(result.runtime.split()[-1].rstrip(")")) != os.getpid()
        assert result.version == 6
    finally:
        stop_cluster(str(temp))
