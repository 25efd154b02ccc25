"""Leases, heartbeats, expiry, resets and self-healing against a real controller
whose sandboxes are real ``farm serve`` children on unix sockets."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_until

import farm
from farm.proto import control_pb2 as pb
from orchestration.client import AsyncFarmClient, FarmClient
from orchestration.errors import (
    LeaseLostError,
    LeaseTimeoutError,
    NoSuchKindError,
    UnknownLeaseError,
)
from orchestration.runtime import BackgroundController
from orchestration.spec import parse_spec

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bg() -> Iterator[BackgroundController]:
    state = tempfile.mkdtemp(prefix="fl-", dir="/tmp")
    spec = parse_spec(
        {
            "state_dir": state,
            "control": {"metrics_port": 0, "lease_ttl_s": 2.0},
            "health": {"interval_s": 0.5, "timeout_s": 1.0, "failures": 2},
            "restart": {"backoff_s": 0.2, "backoff_max_s": 1.0},
            "sandboxes": [
                {"kind": "toy", "env": "toy/text-task", "name": "text", "count": 2},
                {"kind": "toy", "env": "toy/latency", "count": 1, "env_kwargs": {"median_s": 0}},
            ],
        }
    )
    with BackgroundController(spec) as controller:
        controller.wait_healthy(60)
        yield controller
    assert not list(Path(state).glob("**/*.sock")), "socket files left behind"
    assert not (Path(state) / "controller.json").exists()
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def client(bg: BackgroundController) -> Iterator[FarmClient]:
    bg.wait_healthy(30)  # the previous test may have left a sandbox restarting
    with FarmClient(bg.address, holder="test") as c:
        yield c
    bg.wait_healthy(30)
    assert not bg.controller.leases, "a test leaked a lease"  # type: ignore[union-attr]


def _sandbox(client: FarmClient, sandbox_id: str) -> pb.SandboxStatus:
    return next(s for s in client.status().sandboxes if s.id == sandbox_id)


def test_lease_heartbeat_release(client: FarmClient) -> None:
    with client.lease("text", ttl_s=0.6) as lease:
        assert lease.sandbox_id.startswith("text-")
        assert lease.endpoint.startswith("unix://")
        time.sleep(1.5)  # > 2 ttl: only the heartbeats keep it
        assert lease.lost is None
        assert client.heartbeat(lease.lease_id) == pytest.approx(0.6)
        s = _sandbox(client, lease.sandbox_id)
        assert (s.state, s.lease_id, s.holder) == ("leased", lease.lease_id, "test")
        env = farm.connect(lease.endpoint)
        obs, _ = env.reset(seed=0)
        assert "instruction" in obs
        env.close()
    s = _sandbox(client, lease.sandbox_id)
    assert s.state == "healthy" and not s.lease_id and s.leases_total >= 1
    assert client.release(lease.lease_id).already_ended  # releasing twice is harmless
    with pytest.raises(UnknownLeaseError):
        client.heartbeat("no-such-lease")


def test_lease_selectors_and_absent_kind(client: FarmClient) -> None:
    with client.lease("toy/latency") as a:
        assert a.sandbox_id == "latency-0" and a.env == "toy/latency" and a.kind == "toy"
    t0 = time.monotonic()
    with pytest.raises(NoSuchKindError) as e:
        client.lease("android", wait_timeout_s=30)
    assert time.monotonic() - t0 < 2
    assert "no sandboxes of kind 'android'" in str(e.value) and "toy/text-task" in str(e.value)


def test_busy_lease_waits_then_times_out(client: FarmClient) -> None:
    held = [client.lease("text"), client.lease("text")]
    t0 = time.monotonic()
    match = r"no 'text' sandbox became free within 0.5 s \(2 in the farm: 2 leased\)"
    with pytest.raises(LeaseTimeoutError, match=match):
        client.lease("text", wait_timeout_s=0.5)
    assert 0.4 < time.monotonic() - t0 < 3
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(client.lease("text", wait_timeout_s=20)))
    waiter.start()
    time.sleep(0.3)
    held[0].release()  # the waiter gets this one
    waiter.join(20)
    assert got and got[0].sandbox_id == held[0].sandbox_id  # type: ignore[attr-defined]
    for lease in [held[1], got[0]]:
        lease.release()  # type: ignore[attr-defined]


def test_expired_lease_resets_the_sandbox(client: FarmClient) -> None:
    lease = client.lease("text", ttl_s=0.5, heartbeat=False)  # a holder that never heartbeats
    before = _sandbox(client, lease.sandbox_id)
    wait_until(lambda: _sandbox(client, lease.sandbox_id).lease_id == "", timeout=5)
    with pytest.raises(LeaseLostError, match=r"expired \(no heartbeat for 0.5 s\)"):
        client.heartbeat(lease.lease_id)
    after = wait_until(
        lambda: (s := _sandbox(client, lease.sandbox_id)).state == "healthy" and s, timeout=20
    )
    assert after.resets == before.resets + 1
    assert after.incarnation > before.incarnation and after.endpoint != before.endpoint
    assert client.release(lease.lease_id).already_ended


def test_release_with_reset_restarts(client: FarmClient) -> None:
    lease = client.lease("latency")
    before = _sandbox(client, lease.sandbox_id)
    lease.release(reset=True)
    after = wait_until(
        lambda: (s := _sandbox(client, lease.sandbox_id)).state == "healthy" and s, timeout=20
    )
    assert after.resets == before.resets + 1 and after.restarts == before.restarts


def test_leased_sandbox_dies(client: FarmClient) -> None:
    with client.lease("text", ttl_s=1.0) as lease:
        env = farm.connect(lease.endpoint, reconnect_timeout_s=0.5)
        env.reset(seed=1)
        before = _sandbox(client, lease.sandbox_id)
        os.kill(before.pid, signal.SIGKILL)
        _, _, terminated, truncated, info = env.step(0)
        assert truncated and not terminated
        assert "sandbox unavailable" in info["farm.truncated_reason"]
        env.close()
        wait_until(lambda: lease.lost is not None, timeout=5)
        assert "died (killed by SIGKILL)" in lease.lost  # type: ignore[operator]
        assert "truncated for infrastructure reasons" in lease.lost  # type: ignore[operator]
        with pytest.raises(LeaseLostError, match="died"):
            lease.check()
    after = wait_until(
        lambda: (s := _sandbox(client, lease.sandbox_id)).state == "healthy" and s, timeout=20
    )
    assert after.restarts == before.restarts + 1
    assert after.endpoint != before.endpoint and after.pid != before.pid
    assert not os.path.exists(before.endpoint.removeprefix("unix://"))


def test_hung_sandbox_is_replaced(client: FarmClient) -> None:
    before = _sandbox(client, "latency-0")
    os.kill(before.pid, signal.SIGSTOP)  # alive, but answers nothing
    after = wait_until(
        lambda: (
            (s := _sandbox(client, "latency-0")).incarnation > before.incarnation
            and s.state == "healthy"
            and s
        ),
        timeout=30,
    )
    assert after.restarts == before.restarts + 1
    assert "health check failed" in after.last_error


def test_crashed_job_leases_expire(client: FarmClient, bg: BackgroundController) -> None:
    """A job that leases every sandbox and dies: its leases expire, the sandboxes return."""
    job = textwrap.dedent(
        f"""
        import os, sys
        from orchestration.client import FarmClient
        c = FarmClient({bg.address!r}, holder="doomed")
        leases = [c.lease("toy", ttl_s=1.0) for _ in range(3)]
        print("leased", flush=True)
        sys.stdin.readline()
        os.kill(os.getpid(), 9)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", job], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "leased"
    assert all(s.holder == "doomed" for s in client.status().sandboxes)
    with pytest.raises(LeaseTimeoutError):
        client.lease("toy", wait_timeout_s=0.2)
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(10) == -signal.SIGKILL
    t0 = time.monotonic()
    with client.lease("toy", wait_timeout_s=30) as lease:  # waits for an expiry + reset
        assert lease.sandbox_id
    assert time.monotonic() - t0 < 15
    wait_until(lambda: all(s.state == "healthy" for s in client.status().sandboxes), timeout=30)


def test_async_client(bg: BackgroundController) -> None:
    async def job() -> tuple[str, float]:
        async with AsyncFarmClient(bg.address) as c:
            async with await c.lease("text", ttl_s=0.5) as lease:
                env = await farm.aconnect(lease.endpoint)
                await env.reset(seed=3)
                await asyncio.sleep(1.2)
                _, reward, *_ = await env.step(0)
                await env.close()
                assert lease.lost is None
                status = await c.status()
            return lease.sandbox_id, float(reward), status

    sid, _, status = asyncio.run(job())
    assert any(s.id == sid and s.state == "leased" for s in status.sandboxes)


def test_metrics(client: FarmClient) -> None:
    with client.lease("text"):
        pass
    status = client.status()
    assert status.metrics_address.startswith("127.0.0.1:")
    url = f"http://{status.metrics_address}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    assert 'farm_sandboxes{kind="toy",state="healthy"}' in text
    assert 'farm_lease_latency_seconds_count{kind="toy"}' in text
    for name in ("farm_sandbox_restarts_total", "farm_sandbox_reset_seconds"):
        assert f"# TYPE {name.removesuffix('_total')}" in text


def test_memory_limit_watchdog() -> None:
    state = tempfile.mkdtemp(prefix="fm-", dir="/tmp")
    spec = parse_spec(
        {
            "state_dir": state,
            "health": {"interval_s": 0.2},
            "restart": {"backoff_s": 5.0},
            "sandboxes": [
                {"kind": "toy", "env": "toy/text-task", "limits": {"memory_mb": 5, "pids": 50}}
            ],
        }
    )
    try:
        with BackgroundController(spec) as ctl:
            s = wait_until(
                lambda: (st := ctl.status().sandboxes[0]).restarts >= 1 and st, timeout=30
            )
            assert "over its memory limit" in s.last_error
    finally:
        shutil.rmtree(state, ignore_errors=True)
