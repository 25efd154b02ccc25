"""The kill test: a job steps 4 leased sandboxes while sandboxes are SIGKILLed
repeatedly. The job finishes its episodes, every interrupted episode is reported
as an infrastructure truncation, and ``farm status`` shows the restarts."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

import farm
from env_adapters.toy.text_task import solve_instruction
from farm.errors import SandboxUnavailableError
from orchestration.client import FarmClient
from orchestration.runtime import BackgroundController
from orchestration.spec import parse_spec

WORKERS = 4
MIN_EPISODES_PER_WORKER = 5  # and on until the killing is over
KILLS = 6
STEP_DELAY_S = 0.04  # a text-task episode is 4-9 steps: ~0.2-0.4 s


@dataclass
class Tally:
    started: int = 0
    completed: int = 0
    infra_truncated: int = 0
    reasons: list[str] = field(default_factory=list)
    lost_before_episode: int = 0
    lost_leases: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def worker(client: FarmClient, tally: Tally, stop: threading.Event) -> None:
    try:
        run_episodes(client, tally, stop)
    except Exception as e:  # noqa: BLE001 - any error fails the test
        with tally.lock:
            tally.errors.append(repr(e))


def run_episodes(client: FarmClient, tally: Tally, stop: threading.Event) -> None:
    episodes = 0
    while episodes < MIN_EPISODES_PER_WORKER or not stop.is_set():
        with client.lease("toy", ttl_s=2.0, wait_timeout_s=30) as lease:
            try:
                env = farm.connect(lease.endpoint, reconnect_timeout_s=0.3, timeout=2.0)
                obs, _ = env.reset(seed=episodes)
            except SandboxUnavailableError:  # died between lease and reset: no episode yet
                with tally.lock:
                    tally.lost_before_episode += 1
                continue
            with tally.lock:
                tally.started += 1
            actions = solve_instruction(obs["instruction"])
            for a in actions:
                time.sleep(STEP_DELAY_S)
                obs, reward, terminated, truncated, info = env.step(a)
                if truncated:
                    with tally.lock:
                        tally.infra_truncated += 1
                        tally.reasons.append(info.get("farm.truncated_reason", ""))
                    # the controller tells the lease holder too, on its next heartbeat
                    deadline = time.monotonic() + 10
                    while lease.lost is None and time.monotonic() < deadline:
                        time.sleep(0.05)
                    with tally.lock:
                        tally.lost_leases.append(lease.lost or "")
                    break
                if terminated:
                    with tally.lock:
                        tally.completed += reward == 1.0
                        if reward != 1.0:
                            tally.errors.append(f"oracle episode scored {reward}")
                    break
            episodes += 1
            env.close()


@pytest.fixture
def state() -> Iterator[str]:
    """A state dir for the farm (short: socket paths must stay < 108 bytes)."""
    path = tempfile.mkdtemp(prefix="fk-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(150)
def test_job_survives_repeated_sigkills(state: str) -> None:
    spec = parse_spec(
        {
            "state_dir": state,
            "health": {"interval_s": 0.5},
            "restart": {"backoff_s": 0.2, "backoff_max_s": 1.0},
            "sandboxes": [{"kind": "toy", "env": "toy/text-task", "count": WORKERS}],
        }
    )
    tally = Tally()
    stop = threading.Event()
    rng = random.Random(0)
    kills = 0
    killed: set[int] = set()
    with BackgroundController(spec) as bg:
        bg.wait_healthy(60)
        client = FarmClient(bg.address, holder="kill-test")
        threads = [
            threading.Thread(target=worker, args=(client, tally, stop), daemon=True)
            for _ in range(WORKERS)
        ]
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + 60
            while kills < KILLS and time.monotonic() < deadline:
                time.sleep(0.6)
                leased = [
                    s
                    for s in client.status().sandboxes
                    if s.state == "leased" and s.pid not in killed
                ]
                if leased:
                    pid = rng.choice(leased).pid
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    killed.add(pid)
                    kills += 1
        finally:
            stop.set()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "the job did not finish"
        bg.wait_healthy(60)
        cli = subprocess.run(
            [sys.executable, "-m", "farm.cli", "status", "--json", "--address", bg.address],
            capture_output=True,
            text=True,
            timeout=30,
        )
        client.close()
    status = json.loads(cli.stdout)
    restarts = sum(s["restarts"] for s in status["sandboxes"])

    assert not tally.errors, tally.errors
    # the job finished: every episode it started ended, completed or truncated
    assert tally.completed + tally.infra_truncated == tally.started
    assert tally.started >= WORKERS * MIN_EPISODES_PER_WORKER
    assert kills == KILLS and restarts == KILLS, (kills, restarts)
    assert tally.infra_truncated >= 1
    # every interrupted episode was reported as an infrastructure truncation ...
    assert all(r.startswith("sandbox unavailable") for r in tally.reasons), tally.reasons
    # ... and its lease holder was told why
    assert all("truncated for infrastructure reasons" in r for r in tally.lost_leases)
    assert tally.infra_truncated <= kills  # (a lease can also be lost before its episode)
    print(
        f"\nkills={kills} restarts={restarts} episodes={tally.started} completed={tally.completed} "
        f"infra_truncated={tally.infra_truncated} lost_before_episode={tally.lost_before_episode}"
    )
