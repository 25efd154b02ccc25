"""The ray backend on a real two-node local Ray cluster.

A head node (``farm_a`` resources) and a second node (``farm_b``) are started
with ``ray start`` on 127.0.0.1 in a private temp dir, shared by the module and
stopped with ``ray stop`` at the end. The farm runs as ``farm up --detach``
(its controller a Ray driver); this process connects as a second driver to look
at and kill actors.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from helpers import farm_home_cli as farm_cli
from helpers import wait_until

import farm
from env_adapters.toy.text_task import solve_instruction
from orchestration.client import FarmClient

ray = pytest.importorskip("ray")

from orchestration.backends.ray import (  # noqa: E402
    cluster_processes,
    connect,
    namespace_for,
    placement,
    start_loopback_node,
    stop_cluster,
)
from orchestration.errors import SpecError  # noqa: E402
from orchestration.spec import parse_spec  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")  # stopped right after this module, not at the session's end
def cluster() -> Iterator[dict[str, Any]]:
    """A head and a second node, both ``--node-ip-address=127.0.0.1``, with token auth
    (a token in the environment of everything started here, never ~/.ray)."""
    temp_dir = tempfile.mkdtemp(prefix="fray-", dir="/tmp")
    port = _free_port()
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_AUTH_MODE", "token")
    mp.setenv("RAY_AUTH_TOKEN", secrets.token_hex(32))
    mp.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    mp.setenv("RAY_health_check_period_ms", "1000")  # a dead node is declared in ~3 s
    mp.setenv("RAY_health_check_failure_threshold", "3")
    _refresh_ray_config()
    common = ["--num-cpus=4", "--disable-usage-stats"]
    small = ["--object-store-memory=100000000"]
    try:
        start_loopback_node(
            "--head",
            f"--port={port}",
            f"--temp-dir={temp_dir}",
            "--include-dashboard=false",
            f"--ray-client-server-port={_free_port()}",
            '--resources={"farm_a": 2}',
            *common,
            *small,
            head=True,
        )
        start_loopback_node(
            f"--address=127.0.0.1:{port}",
            '--resources={"farm_b": 2}',
            *common,
            *small,
        )
        yield {"address": f"127.0.0.1:{port}", "temp_dir": temp_dir}
    finally:
        left = stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        mp.undo()
        _refresh_ray_config()
        assert not left, f"Ray processes survived `ray stop`: {left}"


def _refresh_ray_config() -> None:
    """Make this process see RAY_AUTH_* as changed (Ray caches its config)."""
    with contextlib.suppress(ImportError):
        from ray._private.authentication_test_utils import reset_auth_token_state

        reset_auth_token_state()


@pytest.fixture(scope="module")
def driver(cluster: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """This process as a Ray driver of the cluster; the node ids by custom resource."""
    connect(cluster["address"])
    nodes = {}
    for n in ray.nodes():
        if n["Alive"]:
            assert n["NodeManagerAddress"] == "127.0.0.1"
            for res in ("farm_a", "farm_b"):
                if res in n["Resources"]:
                    nodes[res] = n["NodeID"]
    assert len(nodes) == 2 and nodes["farm_a"] != nodes["farm_b"]
    yield {**cluster, "nodes": nodes}
    ray.shutdown()


def status(home: Path) -> dict[str, Any]:
    st = farm_cli("status", "--json", home=home, timeout=30)
    assert st.returncode == 0, st.stderr
    return json.loads(st.stdout)


def by_id(home: Path) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in status(home)["sandboxes"]}


def actors(namespace: str) -> set[str]:
    return {
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace
    }


def alive(pid: int | str) -> bool:
    try:
        return psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def home(driver: dict[str, Any]) -> Iterator[Path]:
    """``farm up --detach``: 2 toy sandboxes on each node, placed by resources."""
    path = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))
    spec = {
        "ray": {"address": driver["address"]},
        "health": {"interval_s": 0.5, "timeout_s": 2.0, "failures": 2},
        "restart": {"backoff_s": 0.2, "backoff_max_s": 1.0},
        "control": {"lease_ttl_s": 5.0},
        "sandboxes": [
            {
                "kind": "toy",
                "env": "toy/text-task",
                "name": name,
                "count": 2,
                "backend": "ray",
                "ray": {"resources": {f"farm_{name}": 1}},
                "limits": {"memory_mb": 4096, "pids": 64},  # watched through the actor
                "startup_timeout_s": 60,
            }
            for name in ("a", "b")
        ],
    }
    (path / "farm.yaml").write_text(yaml.safe_dump(spec))
    t0 = time.monotonic()
    up = farm_cli("up", "-f", str(path / "farm.yaml"), "--detach", "--timeout", "120", home=path)
    assert up.returncode == 0, up.stdout + up.stderr
    print(f"farm up (ray, 4 toy sandboxes on 2 nodes): {time.monotonic() - t0:.1f} s")
    yield path
    farm_cli("down", home=path)
    with contextlib.suppress(Exception):
        for name in actors(namespace_for(path)):  # never leave an actor, whatever failed
            ray.kill(ray.get_actor(name, namespace=namespace_for(path)))
    shutil.rmtree(path, ignore_errors=True)


def wait_replaced(home: Path, sid: str, incarnation: int) -> dict[str, Any]:
    def replaced() -> dict[str, Any] | None:
        s = by_id(home)[sid]
        ok = s["incarnation"] > incarnation and s["state"] == "healthy"
        return s if ok else None

    return wait_until(replaced, timeout=60, interval=0.3)


def test_up_places_actors_by_resources(home: Path, driver: dict[str, Any]) -> None:
    st = status(home)
    assert st["running"] and len(st["sandboxes"]) == 4
    ns = namespace_for(home)
    assert actors(ns) == {"a-0.1", "a-1.1", "b-0.1", "b-1.1"}
    for s in st["sandboxes"]:
        assert s["backend"] == "ray" and s["state"] == "healthy"
        host, _, port = s["endpoint"].rpartition(":")
        assert host == "127.0.0.1" and int(port) > 0  # TCP on the node's IP
        where = ray.get(ray.get_actor(f"{s['id']}.1", namespace=ns).node.remote(), timeout=30)
        assert where["node_ip"] == "127.0.0.1"
        assert where["node_id"] == driver["nodes"][f"farm_{s['group']}"], s["id"]
    table = farm_cli("status", home=home).stdout
    assert "ray" in table and "a-0" in table and "b-1" in table
    # the cluster's and the sandboxes' servers listen on loopback only
    procs = cluster_processes(driver["temp_dir"])
    procs += [psutil.Process(int(s["pid"])) for s in st["sandboxes"]]
    assert len(procs) > 6
    listening = [
        (p.pid, c.laddr)
        for p in procs
        for c in p.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert listening
    assert [x for x in listening if x[1].ip not in ("127.0.0.1", "::ffff:127.0.0.1")] == []


def test_lease_and_step_through_the_endpoint(home: Path) -> None:
    with FarmClient(f"unix://{home}/control.sock", holder="ray-test") as client:
        for group in ("a", "b"):
            with client.lease(group) as lease:
                assert lease.sandbox_id.startswith(f"{group}-")
                env = farm.connect(lease.endpoint)
                obs, _ = env.reset(seed=1)
                terminated = False
                for action in solve_instruction(obs["instruction"]):
                    obs, reward, terminated, _, _ = env.step(action)
                assert terminated and reward > 0
                env.close()


def test_killed_actor_is_replaced_and_holder_told(home: Path) -> None:
    ns = namespace_for(home)
    with FarmClient(f"unix://{home}/control.sock", holder="ray-test") as client:
        lease = client.lease("b", ttl_s=2.0)
        before = by_id(home)[lease.sandbox_id]
        env = farm.connect(lease.endpoint, reconnect_timeout_s=0.3, timeout=2.0)
        obs, _ = env.reset(seed=0)
        t0 = time.monotonic()
        ray.kill(ray.get_actor(f"{lease.sandbox_id}.{before['incarnation']}", namespace=ns))
        wait_until(lambda: lease.lost is not None, timeout=20)
        assert "died" in lease.lost and "truncated for infrastructure reasons" in lease.lost
        assert "Ray actor died" in lease.lost
        _, _, _, truncated, info = env.step(solve_instruction(obs["instruction"])[0])
        assert truncated and info.get("farm.truncated_reason")
        env.close()
        lease.release()
        after = wait_replaced(home, lease.sandbox_id, before["incarnation"])
        print(f"actor killed -> replacement healthy: {time.monotonic() - t0:.1f} s")
        assert after["restarts"] == before["restarts"] + 1
        assert after["endpoint"] != before["endpoint"]
        assert not alive(before["pid"])  # its server died with the actor
        name = f"{lease.sandbox_id}.{before['incarnation']}"
        assert name not in actors(ns)


def test_sigkilled_server_is_replaced(home: Path) -> None:
    ns = namespace_for(home)
    before = by_id(home)["a-0"]
    t0 = time.monotonic()
    os.kill(int(before["pid"]), signal.SIGKILL)
    after = wait_replaced(home, "a-0", before["incarnation"])
    print(f"server SIGKILLed -> replacement healthy: {time.monotonic() - t0:.1f} s")
    assert "farm serve killed by SIGKILL" in after["last_error"]
    assert after["restarts"] == before["restarts"] + 1
    assert f"a-0.{before['incarnation']}" not in actors(ns)  # the old actor was stopped
    assert f"a-0.{after['incarnation']}" in actors(ns)


def test_orphans_of_a_killed_controller_are_removed_by_up_and_by_down(
    home: Path,
) -> None:
    ns = namespace_for(home)
    st = status(home)
    old_servers = [s["pid"] for s in st["sandboxes"]]
    old_actors = actors(ns)
    assert len(old_actors) == 4
    os.kill(int(st["pid"]), signal.SIGKILL)  # the controller crashes: its detached actors stay
    wait_until(lambda: not alive(st["pid"]), timeout=10)
    time.sleep(1.0)
    assert actors(ns) == old_actors and all(alive(p) for p in old_servers)

    up = farm_cli("up", "-f", str(home / "farm.yaml"), "--detach", "--timeout", "120", home=home)
    assert up.returncode == 0, up.stdout + up.stderr
    log = (home / "logs" / "controller.log").read_text()
    assert log.count("removing orphan sandbox") >= 4
    wait_until(lambda: not any(alive(p) for p in old_servers), timeout=15)
    st2 = status(home)
    assert {s["state"] for s in st2["sandboxes"]} == {"healthy"}
    assert actors(ns) == {"a-0.1", "a-1.1", "b-0.1", "b-1.1"}

    # it crashes again: this time `farm down` finds the orphans (the spec names the cluster)
    os.kill(int(st2["pid"]), signal.SIGKILL)
    wait_until(lambda: not alive(st2["pid"]), timeout=10)
    down = farm_cli("down", home=home)
    assert down.returncode == 0, down.stderr
    assert down.stdout.count("orphan sandbox") == 4, down.stdout
    assert actors(ns) == set()
    servers = [s["pid"] for s in st2["sandboxes"]]
    wait_until(lambda: not any(alive(p) for p in [*servers, st2["pid"]]), timeout=15)
    assert not list(home.glob("**/*.sock")) and not (home / "controller.json").exists()


def test_node_death_ends_the_sandbox(driver: dict[str, Any]) -> None:
    """The second node dies (its raylet SIGKILLed): its sandbox's server dies with it,
    the lease holder is told, and the farm still stops cleanly. Runs last: the
    cluster is left with one node."""
    home = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))
    ns = namespace_for(home)
    spec = {
        "ray": {"address": driver["address"]},
        "health": {"interval_s": 0.5, "timeout_s": 1.0, "failures": 2},
        "restart": {"backoff_s": 0.2, "backoff_max_s": 1.0},
        "sandboxes": [
            {
                "kind": "toy",
                "env": "toy/text-task",
                "name": "b",
                "backend": "ray",
                "ray": {"resources": {"farm_b": 1}},
                "startup_timeout_s": 3,  # a replacement has nowhere to go: fail fast
            }
        ],
    }
    (home / "farm.yaml").write_text(yaml.safe_dump(spec))
    try:
        up = farm_cli("up", "-f", str(home / "farm.yaml"), "--detach", home=home)
        assert up.returncode == 0, up.stdout + up.stderr
        server = int(by_id(home)["b-0"]["pid"])
        (node,) = [n for n in ray.nodes() if n["Alive"] and "farm_b" in n["Resources"]]
        (raylet,) = [
            p
            for p in cluster_processes(driver["temp_dir"])
            if p.name() == "raylet"
            and any(c.laddr.port == node["NodeManagerPort"] for c in p.net_connections())
        ]
        with FarmClient(f"unix://{home}/control.sock", holder="ray-test") as client:
            lease = client.lease("b", ttl_s=2.0)
            t0 = time.monotonic()
            raylet.kill()
            wait_until(lambda: lease.lost is not None, timeout=30)
            print(f"node killed -> holder told: {time.monotonic() - t0:.1f} s: {lease.lost}")
            assert "truncated for infrastructure reasons" in lease.lost
            wait_until(lambda: not alive(server), timeout=30)  # died with its worker
            lease.release()
        s = by_id(home)["b-0"]
        assert s["restarts"] >= 1 and s["state"] in ("restarting", "starting")
        t0 = time.monotonic()
        down = farm_cli("down", home=home, timeout=90)
        assert down.returncode == 0, down.stderr
        print(f"farm down with an unplaceable sandbox: {time.monotonic() - t0:.1f} s")
        wait_until(lambda: not actors(ns), timeout=30)
    finally:
        farm_cli("down", home=home)
        shutil.rmtree(home, ignore_errors=True)


# no cluster needed ------------------------------------------------------------


def test_unreachable_cluster_fails_fast(tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))
    try:
        spec = {
            "ray": {"address": f"127.0.0.1:{_free_port()}"},
            "sandboxes": [{"kind": "toy", "env": "toy/text-task", "backend": "ray"}],
        }
        (home / "farm.yaml").write_text(yaml.safe_dump(spec))
        t0 = time.monotonic()
        up = farm_cli("up", "-f", str(home / "farm.yaml"), home=home, timeout=60)
        assert up.returncode != 0
        assert "cannot reach the Ray cluster at 127.0.0.1:" in up.stderr + up.stdout
        assert time.monotonic() - t0 < 30
    finally:
        farm_cli("down", home=home)
        shutil.rmtree(home, ignore_errors=True)


def test_spec_ray_options_and_placement_rule() -> None:
    spec = parse_spec(
        {
            "ray": {"address": "127.0.0.1:6379", "resources": {"gpu_box": 1}},
            "sandboxes": [
                {"kind": "toy", "env": "toy/text-task", "backend": "ray"},
                {
                    "kind": "browser",
                    "env": "miniwob/click-button",
                    "backend": "ray",
                    "limits": {"cpus": 2, "memory_mb": 512},
                    "ray": {"resources": {"farm_browser": 1}},
                },
                {"kind": "desktop", "env": "desktop/xterm-echo", "backend": "ray"},
            ],
        }
    )
    toy, browser, desktop = spec.sandboxes
    assert placement(toy, spec.ray.resources, {}) == {"num_cpus": 1, "resources": {"gpu_box": 1}}
    assert placement(browser, None, {}) == {
        "num_cpus": 2,
        "memory": 512 << 20,
        "resources": {"farm_browser": 1},
    }
    assert placement(desktop, None, {"farm_desktop": 3.0}) == {
        "num_cpus": 1,
        "resources": {"farm_desktop": 1},
    }
    assert placement(desktop, None, {"CPU": 4.0}) == {"num_cpus": 1}
    with pytest.raises(SpecError, match="one farm connects to one Ray cluster"):
        parse_spec(
            {
                "ray": {"address": "127.0.0.1:6379"},
                "sandboxes": [
                    {
                        "kind": "toy",
                        "env": "toy/text-task",
                        "backend": "ray",
                        "ray": {"address": "127.0.0.1:7000"},
                    }
                ],
            }
        )
    toy_ray = {"kind": "toy", "env": "toy/text-task", "backend": "ray"}
    for bad, match in [
        ({"resources": {"CPU": 2}}, "'CPU' is not a custom resource"),
        ({"resources": {"farm_a": 0}}, "'farm_a' must be > 0"),
    ]:
        with pytest.raises(SpecError, match=match):
            parse_spec({"sandboxes": [{**toy_ray, "ray": bad}]})
    with pytest.raises(SpecError, match=r"sandboxes\[0\].ray: only for `backend: ray`"):
        parse_spec({"sandboxes": [{**toy_ray, "backend": "local", "ray": {}}]})
    with pytest.raises(SpecError, match="unknown key 'adress'"):
        parse_spec({"ray": {"adress": "auto"}, "sandboxes": [{"kind": "toy", "env": "x"}]})
    assert namespace_for(Path("/a")) != namespace_for(Path("/b"))
    assert namespace_for(Path("/a")).startswith("farm-")


def test_local_cluster_mode_leaves_nothing() -> None:
    """``ray: {address: local}``: the controller starts a private one-node cluster."""
    home = Path(tempfile.mkdtemp(prefix="frl-", dir="/tmp"))
    token_file = Path.home() / ".ray" / "auth_token"
    had_token_file = token_file.exists()
    try:
        spec = {
            "ray": {"address": "local"},
            "sandboxes": [{"kind": "toy", "env": "toy/text-task", "count": 2, "backend": "ray"}],
        }
        (home / "farm.yaml").write_text(yaml.safe_dump(spec))
        up = farm_cli("up", "-f", str(home / "farm.yaml"), "--detach", "--timeout", "90", home=home)
        assert up.returncode == 0, up.stdout + up.stderr
        st = status(home)
        assert [s["endpoint"].rsplit(":", 1)[0] for s in st["sandboxes"]] == ["127.0.0.1"] * 2
        procs = cluster_processes(str(home / "ray"))  # its sessions live in the state dir
        assert procs
        for p in procs:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    assert c.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1"), (p.name(), c)
        with FarmClient(f"unix://{home}/control.sock") as client, client.lease("toy") as lease:
            env = farm.connect(lease.endpoint)
            assert "instruction" in env.reset(seed=0)[0]
            env.close()
        assert farm_cli("down", home=home).returncode == 0
        pids = [int(st["pid"])] + [int(s["pid"]) for s in st["sandboxes"]]
        wait_until(lambda: not any(alive(p) for p in pids), timeout=15)
        psutil.wait_procs(procs, timeout=15)
        assert not cluster_processes(str(home / "ray"))
        assert not [p for p in home.rglob("*") if p.is_socket()]
        assert token_file.exists() == had_token_file  # the token stayed in the environment
    finally:
        farm_cli("down", home=home)
        shutil.rmtree(home, ignore_errors=True)
