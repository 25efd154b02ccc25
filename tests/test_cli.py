"""The ``farm`` command line, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import farm
from farm.server.process import ServerProcess


def farm_cli(
    *args: str, timeout: float = 60, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "farm.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_version() -> None:
    proc = farm_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"farm {farm.__version__}"


def test_envs_json() -> None:
    proc = farm_cli("envs", "--json")
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)
    ids = [e["id"] for e in entries]
    assert {"toy/text-task", "toy/latency", "toy/pixels"} <= set(ids)
    assert ids == sorted(ids)
    assert all(e["description"] for e in entries if e["id"].startswith("toy/"))


def test_envs_table() -> None:
    proc = farm_cli("envs")
    assert proc.returncode == 0, proc.stderr
    assert "toy/text-task" in proc.stdout and "farm environments" in proc.stdout


def test_serve_unknown_env() -> None:
    proc = farm_cli("serve", "no-such-env")
    assert proc.returncode == 2
    assert "no environment 'no-such-env'" in proc.stderr
    assert "farm envs" in proc.stderr  # tells where to look
    proc = farm_cli("serve", "toy/text-tsak")
    assert proc.returncode == 2
    assert "no environment 'toy/text-tsak'; did you mean toy/text-task" in proc.stderr
    proc = farm_cli("serve", "no_such_module:factory")
    assert proc.returncode == 2
    assert "cannot import module 'no_such_module'" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env-kwargs", "{nope"], "--env-kwargs is not valid JSON"),
        (["--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
        (["--address", "nowhere"], "invalid address 'nowhere'"),
        (["--max-sessions", "0"], "max_sessions must be >= 1"),
        (["--idle-timeout", "0"], "idle_timeout_s must be > 0"),
    ],
)
def test_serve_bad_arguments(args: list[str], message: str) -> None:
    proc = farm_cli("serve", "toy/text-task", *args)
    assert proc.returncode == 2, proc
    assert message in proc.stderr


def test_describe_json(text_server: ServerProcess) -> None:
    proc = farm_cli("describe", text_server.address, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["env_id"] == "toy/text-task"
    assert data["action_space"] == "Discrete(26)"
    assert data["observation_space"].startswith("Dict('instruction': Text(")
    assert data["protocol_versions"] == ["1.0"]
    assert data["server_version"] == farm.__version__
    assert data["metadata"]["farm.executor"] == "inline"


def test_describe_table(text_server_tcp: ServerProcess) -> None:
    proc = farm_cli("describe", text_server_tcp.address)
    assert proc.returncode == 0, proc.stderr
    assert "Discrete(26)" in proc.stdout and "toy/text-task" in proc.stdout


def test_health_json(text_server: ServerProcess) -> None:
    proc = farm_cli("health", text_server.address, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "STATUS_SERVING"
    assert data["env_id"] == "toy/text-task"
    assert data["server_version"] == farm.__version__
    assert int(data["max_sessions"]) == 64
    assert float(data["uptime_s"]) > 0
    assert int(data["active_sessions"]) >= 0


def test_health_and_describe_with_token() -> None:
    with ServerProcess("toy/latency", args=["--token", "tok"]) as srv:
        proc = farm_cli("health", srv.address, "--json")
        assert proc.returncode == 2
        assert "UNAUTHENTICATED" in proc.stderr
        proc = farm_cli("health", srv.address, "--json", "--token", "tok")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["env_id"] == "toy/latency"
        proc = farm_cli("describe", srv.address, "--json", env={"FARM_TOKEN": "tok"})
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["observation_space"] == "Box(-1.0, 1.0, (4,), float32)"


def test_health_no_server(sock_path) -> None:
    proc = farm_cli("health", sock_path("nobody"))
    assert proc.returncode == 2
    assert "no farm server at" in proc.stderr and "socket file does not exist" in proc.stderr


def test_serve_prints_address_and_stops_on_sigterm(sock_path) -> None:
    address = sock_path("cli")
    proc = subprocess.Popen(
        [sys.executable, "-m", "farm.cli", "serve", "toy/pixels", "--address", address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"farm: serving toy/pixels at {address}"
        health = farm_cli("health", address, "--json")
        assert json.loads(health.stdout)["env_id"] == "toy/pixels"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "server stopped" in err
    assert not os.path.exists(address[len("unix://") :])
