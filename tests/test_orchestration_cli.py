"""``farm up`` / ``status`` / ``down`` / ``doctor`` through the real command line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import farm_home_cli, wait_until, write_spec

pytestmark = pytest.mark.timeout(120)

TOY = {"kind": "toy", "env": "toy/text-task", "count": 2}


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh FARM_HOME (short: socket paths must stay < 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="fh-", dir="/tmp"))
    yield path
    farm("down", home=path)  # never leave a farm running, whatever the test did
    shutil.rmtree(path, ignore_errors=True)


def farm(*args: str, home: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return farm_home_cli(*args, home=home, timeout=timeout)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def leftovers(home: Path) -> list[str]:
    """Sockets and pid files under ``home`` (logs and the empty lock file may stay)."""
    return sorted(
        str(p.relative_to(home))
        for p in home.rglob("*")
        if p.is_socket() or p.suffix == ".sock" or p.name == "controller.json"
    )


def test_up_status_down_leaves_nothing(home: Path) -> None:
    spec = write_spec(home, TOY)
    up = farm("up", "-f", spec, "--detach", home=home)
    assert up.returncode == 0, up.stderr
    assert "farm is up at" in up.stderr and "text-task-1" in up.stdout

    st = farm("status", "--json", home=home)
    assert st.returncode == 0, st.stderr
    status = json.loads(st.stdout)
    assert status["running"] and len(status["sandboxes"]) == 2
    assert {s["state"] for s in status["sandboxes"]} == {"healthy"}
    pids = [int(status["pid"])] + [int(s["pid"]) for s in status["sandboxes"]]
    table = farm("status", home=home).stdout
    for column in ("kind", "id", "backend", "endpoint", "state", "health", "leases", "restarts"):
        assert column in table
    assert "text-task-0" in table and "healthy" in table

    again = farm("up", "-f", spec, "--detach", home=home)  # the same control address
    assert again.returncode == 2
    assert "a farm is already running at unix://" in again.stderr and "farm down" in again.stderr
    assert farm("up", "-f", spec, home=home).returncode == 2  # foreground too

    down = farm("down", home=home)
    assert down.returncode == 0, down.stderr
    assert "farm stopped: 2 sandboxes" in down.stdout
    assert all(gone(pid) for pid in pids)
    assert leftovers(home) == []

    nothing = farm("down", home=home)
    assert nothing.returncode == 0 and "nothing is running at unix://" in nothing.stdout
    st = farm("status", home=home)
    assert st.returncode == 1 and "nothing is running" in st.stderr


def test_foreground_up_stops_on_sigint(home: Path) -> None:
    spec = write_spec(home, {**TOY, "count": 1})
    env = {**os.environ, "FARM_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "farm.cli", "up", "-f", spec],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: (
                (r := farm("status", "--json", home=home)).returncode == 0
                and json.loads(r.stdout)["sandboxes"][0]["state"] == "healthy"
            ),
            timeout=60,
            interval=0.3,
        )
        sandbox_pid = int(
            json.loads(farm("status", "--json", home=home).stdout)["sandboxes"][0]["pid"]
        )
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "farm stopped" in err
    assert gone(sandbox_pid)
    assert leftovers(home) == []


def test_invalid_spec_and_missing_spec(home: Path) -> None:
    spec = write_spec(home, {"kind": "androd", "env": "x", "count": -1, "cuont": 1})
    r = farm("up", "-f", spec, "--detach", home=home)
    assert r.returncode == 2
    assert "sandboxes[0].kind: unknown kind 'androd'" in r.stderr
    assert "sandboxes[0].count: count must be >= 0" in r.stderr
    assert "sandboxes[0].cuont: unknown key 'cuont'" in r.stderr
    assert leftovers(home) == []
    r = farm("up", home=home)  # no -f and no ./farm.yaml (cwd is the repo root)
    assert r.returncode == 2 and "no farm spec" in r.stderr
    os.environ["DOCKER_HOST"] = f"unix://{home}/no-daemon.sock"  # a docker spec, no daemon
    try:
        r = farm("up", "-f", write_spec(home, {**TOY, "backend": "docker"}), "-d", home=home)
    finally:
        del os.environ["DOCKER_HOST"]
    assert r.returncode == 2 and "no Docker daemon answers" in r.stderr, r.stderr


def test_sandbox_that_cannot_start_fails_up(home: Path) -> None:
    spec = write_spec(home, {"kind": "toy", "env": "toy/no-such-env"}, restart={"backoff_s": 0.1})
    t0 = time.monotonic()
    r = farm("up", "-f", spec, "--detach", home=home)
    assert r.returncode == 2
    assert "failed to start 3 times in a row" in r.stderr and "toy/no-such-env" in r.stderr
    assert time.monotonic() - t0 < 60
    assert farm("status", home=home).returncode == 1
    assert leftovers(home) == []


def test_down_after_controller_crash_removes_orphans(home: Path) -> None:
    spec = write_spec(home, {**TOY, "count": 1})
    assert farm("up", "-f", spec, "-d", home=home).returncode == 0
    status = json.loads(farm("status", "--json", home=home).stdout)
    controller, sandbox = int(status["pid"]), int(status["sandboxes"][0]["pid"])
    os.kill(controller, signal.SIGKILL)
    wait_until(lambda: gone(controller), timeout=10)
    assert not gone(sandbox)  # orphaned
    assert farm("status", home=home).returncode == 1
    down = farm("down", home=home)
    assert down.returncode == 0, down.stderr
    assert "removed what it left" in down.stdout and "orphan sandbox text-task-0" in down.stdout
    assert "stale control socket" in down.stdout
    wait_until(lambda: gone(sandbox), timeout=10)
    assert leftovers(home) == []


def test_doctor_json(home: Path) -> None:
    r = farm("doctor", "--json", home=home)
    assert r.returncode in (0, 1)
    checks = json.loads(r.stdout)
    names = {(c["target"], c["name"]) for c in checks}
    assert ("browser", "Chromium") in names and ("android", "/dev/kvm") in names
    assert ("android", "adb") in names and ("backend:docker", "Docker daemon") in names
    assert all(c["fix"] for c in checks if not c["ok"])
    r = farm("doctor", "-f", write_spec(home, TOY), home=home)
    assert r.returncode == 0 and "gymnasium" in r.stdout and "Chromium" not in r.stdout
