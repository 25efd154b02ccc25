"""The docker backend for real: a Docker daemon, the ``farm-toy`` image, real
containers, driven through the real ``farm`` command line.

The daemon is started by ``scripts/bootstrap`` (``scripts/start-dockerd``; the
fixture runs it again, which does nothing when a daemon answers) and the image
are built by ``farm images build --kind toy,browser`` when missing or stale
(about 3 minutes the first time, base included; seconds to a minute after). If either
cannot be done the tests fail with the reason: they are never skipped silently.
"""

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
from typing import Any

import pytest
from helpers import farm_home_cli, wait_until, write_spec

import farm
from env_adapters.toy.text_task import solve_instruction
from farm.errors import SandboxUnavailableError
from orchestration.client import FarmClient

# func_only: the first test's setup may build the images (minutes on a fresh machine;
# the build has its own timeout); each test itself must finish in 180 s
pytestmark = [pytest.mark.docker, pytest.mark.timeout(180, func_only=True)]

ROOT = Path(__file__).resolve().parents[1]
LIMITS = {"memory_mb": 256, "pids": 64, "cpus": 1.0}
TOY = {"kind": "toy", "env": "toy/text-task", "count": 2, "backend": "docker", "limits": LIMITS}


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    """A client of a running daemon, with a current ``farm-toy`` image."""
    try:
        import docker
    except ImportError:
        pytest.fail("the docker SDK is missing: pip install -e '.[docker]' (scripts/bootstrap)")
    started = subprocess.run(
        ["bash", str(ROOT / "scripts/start-dockerd")], capture_output=True, text=True, timeout=90
    )
    if started.returncode != 0:
        pytest.fail(f"no Docker daemon could be started:\n{started.stdout}{started.stderr}")
    t0 = time.monotonic()
    built = subprocess.run(
        [sys.executable, "-m", "farm.cli", "images", "build", "--kind", "toy,browser"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if built.returncode != 0:
        pytest.fail(f"`farm images build --kind toy,browser` failed:\n{built.stdout}{built.stderr}")
    print(f"\nfarm-toy and farm-browser images ready in {time.monotonic() - t0:.1f} s")
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture
def home(docker_client: Any) -> Iterator[Path]:
    """A fresh FARM_HOME (short: socket paths must stay < 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="fd-", dir="/tmp"))
    yield path
    farm_cli("down", home=path)
    for c in containers(docker_client, path):  # never leave a container behind
        c.remove(force=True)
    shutil.rmtree(path, ignore_errors=True)


def farm_cli(*args: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return farm_home_cli(*args, home=home, timeout=timeout, columns=250)


def containers(client: Any, home: Path) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"farm.state_dir={home}"})


def sockets(home: Path) -> list[str]:
    return sorted(str(p) for p in home.rglob("*") if p.is_socket() or p.suffix == ".sock")


def status(home: Path) -> dict[str, Any]:
    r = farm_cli("status", "--json", home=home)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def play(endpoint: str, seed: int = 0) -> float:
    """One oracle episode of toy/text-task through ``endpoint``; its reward."""
    env = farm.connect(endpoint)
    try:
        obs, _ = env.reset(seed=seed)
        reward = 0.0
        for action in solve_instruction(obs["instruction"]):
            obs, reward, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        return float(reward)
    finally:
        env.close()


def test_up_lease_kill_replace_down(home: Path, docker_client: Any) -> None:
    spec = write_spec(home, TOY, health={"interval_s": 0.5}, restart={"backoff_s": 0.2})
    t0 = time.monotonic()
    up = farm_cli("up", "-f", spec, "--detach", home=home)
    assert up.returncode == 0, up.stderr
    print(f"\nfarm up (2 toy sandboxes in docker): {time.monotonic() - t0:.1f} s")

    st = status(home)
    assert {s["backend"] for s in st["sandboxes"]} == {"docker"}
    assert {s["state"] for s in st["sandboxes"]} == {"healthy"}
    table = farm_cli("status", home=home).stdout
    assert "docker" in table and "text-task-0" in table
    running = containers(docker_client, home)
    assert len(running) == 2 and {c.status for c in running} == {"running"}

    # the security options are really applied
    for c in running:
        host = c.attrs["HostConfig"]
        assert host["NetworkMode"] == "none"
        assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
        assert host["ReadonlyRootfs"] is True
        assert host["Memory"] == 256 << 20 and host["MemorySwap"] == 256 << 20
        assert host["PidsLimit"] == 64 and host["NanoCpus"] == 1_000_000_000
        assert "no-new-privileges" in host["SecurityOpt"]
        assert set(host["Tmpfs"]) >= {"/tmp", "/home/farm"}
        assert c.attrs["Config"]["User"] not in ("", "0", "root", "0:0")
        assert c.labels["farm.state_dir"] == str(home)
        networks = c.attrs["NetworkSettings"]["Networks"]
        assert list(networks) == ["none"]

    # lease and step through the mounted socket
    client = FarmClient(st["control_address"], holder="docker-test")
    try:
        with client.lease("toy", ttl_s=5.0, wait_timeout_s=30) as lease:
            assert lease.endpoint.startswith(f"unix://{home}/run/")
            assert play(lease.endpoint) == 1.0

        # a container killed with `docker kill` is replaced and its lease holder is told
        lease = client.lease("toy", ttl_s=5.0, wait_timeout_s=30)
        victim = next(s for s in status(home)["sandboxes"] if s["lease_id"] == lease.lease_id)
        env = farm.connect(lease.endpoint, reconnect_timeout_s=0.3, timeout=2.0)
        obs, _ = env.reset(seed=1)
        container = next(
            c
            for c in containers(docker_client, home)
            if c.labels["farm.sandbox_id"] == victim["id"]
        )
        t_kill = time.monotonic()
        container.kill()
        action = solve_instruction(obs["instruction"])[0]
        try:
            _, _, _, truncated, info = env.step(action)
            assert truncated and info.get("farm.truncated_reason", "").startswith(
                "sandbox unavailable"
            ), info
        except SandboxUnavailableError:
            pass  # reported as an error rather than a truncation: also an infrastructure end
        env.close()
        wait_until(lambda: lease.lost is not None, timeout=15)
        assert "killed by SIGKILL" in lease.lost and "infrastructure" in lease.lost, lease.lost
        lease.release()

        def replaced() -> dict[str, Any] | None:
            sb = next(s for s in status(home)["sandboxes"] if s["id"] == victim["id"])
            ok = sb["state"] == "healthy" and sb["incarnation"] > victim["incarnation"]
            return sb if ok else None

        sb = wait_until(replaced, timeout=60, interval=0.2)
        print(f"replaced after docker kill in {time.monotonic() - t_kill:.1f} s")
        assert sb["restarts"] == 1 and "killed by SIGKILL" in sb["last_error"]
        assert sb["endpoint"] != victim["endpoint"]
        assert len([c for c in containers(docker_client, home) if c.status == "running"]) == 2
        with client.lease("toy", ttl_s=5.0, wait_timeout_s=30) as lease2:
            assert play(lease2.endpoint, seed=2) == 1.0
    finally:
        client.close()

    down = farm_cli("down", home=home)
    assert down.returncode == 0, down.stderr
    assert "farm stopped: 2 sandboxes" in down.stdout
    assert containers(docker_client, home) == []
    assert sockets(home) == []
    assert (home / "logs" / "text-task-0.log").exists()  # the container's output, kept


def test_orphans_of_a_killed_controller_are_removed(home: Path, docker_client: Any) -> None:
    spec = write_spec(home, {**TOY, "count": 1})

    def up_and_kill_controller() -> str:
        up = farm_cli("up", "-f", spec, "--detach", home=home)
        assert up.returncode == 0, up.stderr
        controller = int(status(home)["pid"])
        os.kill(controller, signal.SIGKILL)
        wait_until(lambda: not _alive(controller), timeout=10)
        (orphan,) = containers(docker_client, home)
        assert orphan.status == "running"
        return orphan.id

    # the next `farm down` removes the orphan container
    first = up_and_kill_controller()
    down = farm_cli("down", home=home)
    assert down.returncode == 0, down.stderr
    assert "orphan sandbox text-task-0 (container" in down.stdout
    assert containers(docker_client, home) == []
    assert sockets(home) == []

    # the next `farm up` does too, and starts its own
    second = up_and_kill_controller()
    assert second != first
    up = farm_cli("up", "-f", spec, "--detach", home=home)
    assert up.returncode == 0, up.stderr
    now = containers(docker_client, home)
    assert len(now) == 1 and now[0].id != second
    down = farm_cli("down", home=home)
    assert down.returncode == 0, down.stderr
    assert containers(docker_client, home) == [] and sockets(home) == []


def test_browser_sandbox_in_docker(home: Path, docker_client: Any) -> None:
    group = {
        "kind": "browser",
        "env": "miniwob/click-button",
        "backend": "docker",
        "limits": {"memory_mb": 1536, "pids": 512, "cpus": 1.5},
        "startup_timeout_s": 120,
    }
    up = farm_cli("up", "-f", write_spec(home, group), "--detach", home=home, timeout=180)
    assert up.returncode == 0, up.stderr
    (c,) = containers(docker_client, home)
    host = c.attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["ReadonlyRootfs"] and host["ShmSize"] == 512 << 20
    client = FarmClient(status(home)["control_address"], holder="docker-test")
    try:
        with client.lease("browser", wait_timeout_s=30) as lease:
            env = farm.connect(lease.endpoint, timeout=120)
            obs, _ = env.reset(seed=0)
            assert obs["screenshot"].shape == (210, 160, 3) and obs["instruction"]
            _, reward, *_ = env.step(env.action_space.sample())
            assert reward in (0.0, 1.0, -1.0)
            env.close()
    finally:
        client.close()
    assert farm_cli("down", home=home).returncode == 0
    assert containers(docker_client, home) == [] and sockets(home) == []


def test_out_of_memory_is_reported(home: Path) -> None:
    group = {**TOY, "count": 1, "limits": {"memory_mb": 24}}  # farm serve needs far more
    spec = write_spec(home, group, restart={"backoff_s": 0})
    r = farm_cli("up", "-f", spec, "--detach", home=home)
    assert r.returncode == 2
    assert "killed: out of memory (OOMKilled, limit 24 MB)" in r.stderr, r.stderr
    assert sockets(home) == []


def test_missing_image_and_android_are_clear_errors(home: Path) -> None:
    from orchestration.backends.docker import image_name

    assert image_name("toy") == "farm-toy:latest"
    spec = write_spec(
        home, {"kind": "android", "env": "android/x", "backend": "docker"}, restart={"backoff_s": 0}
    )
    r = farm_cli("up", "-f", spec, "--detach", home=home)
    assert r.returncode == 2 and "no image farm-android:latest" in r.stderr, r.stderr
    r = farm_cli("images", "build", "--kind", "toy,phone", home=home)  # android: test_android_*
    assert r.returncode == 2 and "unknown kind phone" in r.stderr, r.stderr


def test_images_ls(home: Path) -> None:
    r = farm_cli("images", "ls", "--json", home=home)
    assert r.returncode == 0, r.stderr
    rows = {row["image"]: row for row in json.loads(r.stdout)}
    assert rows["farm-base:bookworm"]["present"]
    toy = rows["farm-toy:latest"]
    # current when built from this tree; stale once anything in farm's packages changed since
    assert toy["present"] and toy["source"] in ("current", "stale") and toy["size_mb"] > 0
    table = farm_cli("images", "ls", home=home).stdout
    assert "farm-toy:latest" in table and toy["source"] in table


def test_build_errors_are_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_client: Any
) -> None:
    import io

    from rich.console import Console
    from rich.progress import Progress

    from farm.cli.images import Builder, ImageBuildError, debian_mirrors

    mirror, _ = debian_mirrors()  # read from this host's apt sources
    assert mirror.startswith(("http://", "https://", "file:/"))
    monkeypatch.setenv("FARM_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    assert debian_mirrors()[0] == "http://127.0.0.1:9/debian"
    console = Console(file=io.StringIO())
    builder = Builder(console, tmp_path / "logs")
    with Progress(console=console) as progress:
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        with pytest.raises(ImageBuildError, match="debootstrap, which needs root"):
            builder.build_base(progress)
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        monkeypatch.setenv("PATH", str(tmp_path))
        with pytest.raises(ImageBuildError, match="needs debootstrap: apt-get install"):
            builder.build_base(progress)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
