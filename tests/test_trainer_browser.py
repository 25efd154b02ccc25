"""A short training job on real browser sandboxes: the job starts its own farm (local
backend: `farm serve miniwob/suite` processes with Chromium), leases them over the
control service, plays and records MiniWoB++ episodes over gRPC, trains, checkpoints
and stops everything it started."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("torch", reason="needs torch (pip install farm[train])")
pytest.importorskip("playwright.async_api", reason="needs playwright (pip install farm[browser])")

from farm.recording.store import EpisodeStore
from trainer.api.spec import parse_spec
from trainer.infra import checkpoint
from trainer.infra.job import Job

pytestmark = [
    pytest.mark.train,
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="needs /usr/bin/chromium"),
]


def chromiums() -> set[int]:
    """Live Chromium processes (zombies excluded: this machine's init may not reap them)."""
    found = set()
    for p in psutil.process_iter(["name", "status"]):
        if (p.info["name"] or "").startswith("chromium") and p.info["status"] != "zombie":
            found.add(p.pid)
    return found


def test_job_trains_on_miniwob_sandboxes_it_starts_itself(tmp_path: Path) -> None:
    before = chromiums()
    spec = parse_spec(
        {
            "name": "mw",
            "run_dir": str(tmp_path / "run"),
            "sandboxes": {
                "source": "job",
                "kind": "browser",
                "env": "miniwob/suite",
                "count": 2,
                "env_kwargs": {"reuse_page": True},
            },
            "algorithm": {
                "group_size": 2,
                "redundancy": 1,
                "eta": 1,
                "batch_groups": 2,
                "max_steps": 4,
                "group_seeds": "distinct",
            },
            "tasks": {
                "train": ["click-button", "focus-text"],
                "infeasible": ["click-button-infeasible"],
                "eval": {"episodes_per_task": 3, "every_s": 0},
            },
            "budget": {"learner_steps": 4, "minutes": 3},
            "checkpoint": {"every_steps": 2},
        }
    )
    result = Job(spec, progress=False).run()
    assert result.version >= 1 and result.evals[0]["label"] == "start"
    assert set(result.evals[-1]["per_task"]) == {"click-button", "focus-text"}
    assert "click-button-infeasible" in result.evals[-1]["infeasible"]
    run = tmp_path / "run"
    assert checkpoint.latest(run) is not None
    store = EpisodeStore(str(run / "episodes"))
    rows = store.list()
    assert len(rows) >= 10
    assert {r["env_id"] for r in rows} == {"miniwob/suite"}
    ep = store.open(rows[-1]["episode_id"])
    assert ep.steps and ep.steps[-1].annotations.get("policy_version") is not None
    store.close()
    # the job's farm and its browsers are gone
    deadline = time.monotonic() + 10
    while (leftover := chromiums() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftover, [psutil.Process(p).cmdline()[:2] for p in leftover if psutil.pid_exists(p)]
