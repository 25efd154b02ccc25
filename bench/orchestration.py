"""Orchestration: ``farm up`` to healthy, lease round trip, replacement after SIGKILL.

A farm of 4 sandboxes on the local backend (browser ``miniwob/click-button`` or
toy ``toy/text-task``; ``--kind auto`` takes browser when the CPUs were idle
before the start and Chromium is installed), driven through the real CLI:

* **up**: wall time of ``farm up -f spec --detach`` (the command returns once all
  4 sandboxes are healthy), ``--rounds`` times with a ``farm down`` in between;
* **lease+release**: one ``FarmClient.lease`` + ``Lease.release`` (no reset; a
  heartbeat thread is started and stopped with each lease), back to back;
* **replace**: SIGKILL a healthy sandbox's process, then time until the
  controller reports its slot healthy again with a new incarnation (polling
  Status every 20 ms). Kills go round-robin over the 4 slots and the spec sets
  ``restart.stable_s: 1`` so each is a first restart (no backoff; the backoff
  applies to a slot failing again and again). A sandbox is healthy once its
  ``farm serve`` answers Health; a browser sandbox starts Chromium at its first
  reset, so the table also gives SIGKILL -> the replacement's first ``reset``
  returned (a client connects and resets as soon as the slot is healthy).

* **docker** (``--docker auto``, the default, when a daemon answers and the
  image ``farm-<kind>:latest`` exists): the same up rounds and kills on the
  docker backend (the kill is ``docker kill`` of the container), for the local
  run's kind if its image exists, else ``toy``; the table and JSON say which.

* **ray** (``--ray auto``, the default, when Ray is installed): 4 ``toy``
  sandboxes on the ray backend of a two-node Ray cluster started here (``ray
  start`` twice on 127.0.0.1, 2 CPUs each, stopped at the end): the same up
  rounds, lease round trips and kills (SIGKILL of the sandbox's ``farm serve``).

Prints a table and writes ``bench/results/orchestration.json``. Only unix
sockets under a temporary state dir are used.

    .venv/bin/python bench/orchestration.py            # 3 up rounds, 8 kills
    .venv/bin/python bench/orchestration.py --quick    # 1 up round, 4 kills
"""

from __future__ import annotations

import farm  # isort: skip  (farm tunes gRPC before grpc loads)

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from _common import ForeignLoad, fmt_us, machine_info, print_foreign_load, warn_if_busy, write_json
from rich.console import Console
from rich.table import Table

ENVS = {"browser": "miniwob/click-button", "toy": "toy/text-task"}


def farm_client_class() -> Any:
    """``orchestration.client.FarmClient``. This script is named like the package and
    its folder comes first on ``sys.path``, so import it with that folder set aside."""
    here = str(Path(__file__).resolve().parent)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(here)]
    try:
        from orchestration.client import FarmClient
    finally:
        sys.path[:] = saved
    return FarmClient


def farm_cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "farm.cli", *args],
        env={**os.environ, "FARM_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def choose_kind(requested: str, info: dict[str, Any]) -> tuple[str, str]:
    if requested != "auto":
        return requested, "as asked"
    if not os.path.exists("/usr/bin/chromium"):
        return "toy", "no Chromium at /usr/bin/chromium"
    busy = info["cpu_busy_percent_before"]
    if busy > 25:
        return "toy", f"CPUs {busy:.0f}% busy before the start"
    return "browser", f"CPUs {busy:.0f}% busy before the start"


def wait_replaced(client: Any, sandbox_id: str, incarnation: int, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        s = next(s for s in client.status().sandboxes if s.id == sandbox_id)
        if s.incarnation > incarnation and s.state == "healthy":
            return time.monotonic() - t0
        time.sleep(0.02)
    raise TimeoutError(f"{sandbox_id} was not replaced within {timeout} s")


def up_rounds(
    home: Path, spec_path: Path, rounds: int, label: str, console: Console
) -> list[float]:
    """``rounds`` timed ``farm up --detach`` (returns once all are healthy), ``farm down``
    between them; the farm is left up."""
    up_s: list[float] = []
    for r in range(rounds):
        t0 = time.monotonic()
        res = farm_cli(home, "up", "-f", str(spec_path), "--detach", "-q")
        up_s.append(time.monotonic() - t0)
        if res.returncode != 0:
            raise SystemExit(f"farm up ({label}) failed:\n{res.stderr}")
        console.print(f"{label} up round {r + 1}: {up_s[-1]:.2f} s")
        if r < rounds - 1:
            farm_cli(home, "down")
    return up_s


def lease_round_trips(client: Any, kind: str, n: int, warmup: int = 10) -> list[int]:
    """``n`` timed lease + release round trips (ns), after ``warmup`` untimed ones."""
    lease_ns: list[int] = []
    for i in range(n + warmup):
        t0 = time.perf_counter_ns()
        lease = client.lease(kind, wait_timeout_s=30)
        lease.release()
        if i >= warmup:
            lease_ns.append(time.perf_counter_ns() - t0)
    return lease_ns


def kill_rounds(
    client: Any,
    kills: int,
    kill: Callable[[Any], None],
    label: str,
    console: Console,
    *,
    first_reset: bool = False,
) -> tuple[list[float], list[float]]:
    """Kill the slots round-robin (``kill(sandbox)``); per kill the seconds until the slot
    is healthy again and, with ``first_reset``, until a reset on the replacement returned."""
    replace_s: list[float] = []
    first_reset_s: list[float] = []
    ids = [s.id for s in client.status().sandboxes]
    for i in range(kills):
        sid = ids[i % len(ids)]
        s = next(s for s in client.status().sandboxes if s.id == sid)
        t_kill = time.monotonic()
        kill(s)
        replace_s.append(wait_replaced(client, sid, s.incarnation, 120))
        line = f"{label} {i + 1} ({sid}): replaced in {replace_s[-1]:.2f} s"
        if first_reset:
            new = next(s for s in client.status().sandboxes if s.id == sid)
            env = farm.connect(new.endpoint)
            try:
                env.reset(seed=i)
            finally:
                env.close()
            first_reset_s.append(time.monotonic() - t_kill)
            line += f", first reset done {first_reset_s[-1]:.2f} s after the kill"
        console.print(line)
        time.sleep(0.5)
    return replace_s, first_reset_s


def replace_summary(replace_s: list[float]) -> dict[str, Any]:
    return {
        "replace_s": replace_s,
        "replace_p50_s": float(np.percentile(replace_s, 50)) if replace_s else None,
        "replace_max_s": max(replace_s) if replace_s else None,
    }


def docker_kind(local_kind: str) -> tuple[str | None, str]:
    """The kind to run on the docker backend, or None (and why)."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as e:  # noqa: BLE001 - no SDK or no daemon: no docker row
        return None, f"no Docker daemon ({type(e).__name__})"
    try:
        for kind in dict.fromkeys([local_kind, "toy"]):
            try:
                client.images.get(f"farm-{kind}:latest")
                return kind, f"image farm-{kind}:latest"
            except docker.errors.ImageNotFound:
                continue
        return None, "no farm-toy:latest image (farm images build --kind toy)"
    finally:
        client.close()


def docker_rounds(kind: str, count: int, rounds: int, kills: int, console: Console) -> dict:
    """``farm up`` rounds and ``docker kill`` replacements on the docker backend."""
    import docker

    env_id = ENVS[kind]
    home = Path(tempfile.mkdtemp(prefix="fbd-", dir="/tmp"))
    spec_path = home / "farm.yaml"
    spec_path.write_text(
        yaml.safe_dump(
            {
                "restart": {"stable_s": 1.0},
                "sandboxes": [{"kind": kind, "env": env_id, "count": count, "backend": "docker"}],
            }
        )
    )
    dclient = docker.from_env()

    def docker_kill(sandbox: Any) -> None:
        labels = [f"farm.state_dir={home}", f"farm.sandbox_id={sandbox.id}"]
        (container,) = dclient.containers.list(filters={"label": labels})
        container.kill()

    try:
        up_s = up_rounds(home, spec_path, rounds, "docker", console)
        client = farm_client_class()(f"unix://{home}/control.sock", holder="bench")
        replace_s, _ = kill_rounds(client, kills, docker_kill, "docker kill", console)
        client.close()
    finally:
        farm_cli(home, "down")
        dclient.close()
        shutil.rmtree(home, ignore_errors=True)
    return {
        "kind": kind,
        "env": env_id,
        "up_s": up_s,
        "up_median_s": statistics.median(up_s),
        **replace_summary(replace_s),
    }


def ray_rounds(count: int, rounds: int, leases: int, kills: int, console: Console) -> dict:
    """``farm up`` rounds, lease round trips and kills on the ray backend (toy)."""
    import secrets
    import socket

    here = str(Path(__file__).resolve().parent)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(here)]
    try:
        from orchestration.backends.ray import start_loopback_node, stop_cluster
    finally:
        sys.path[:] = saved

    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    os.environ.setdefault("RAY_AUTH_MODE", "token")  # a token for this run, never ~/.ray
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    temp_dir = tempfile.mkdtemp(prefix="fbr-", dir="/tmp")
    home = Path(tempfile.mkdtemp(prefix="fbr-", dir="/tmp"))
    port = free_port()
    node = ["--num-cpus=2", "--object-store-memory=100000000", "--disable-usage-stats"]
    try:
        t0 = time.monotonic()
        start_loopback_node(
            "--head",
            f"--port={port}",
            f"--temp-dir={temp_dir}",
            "--include-dashboard=false",
            f"--ray-client-server-port={free_port()}",
            *node,
            head=True,
        )
        start_loopback_node(f"--address=127.0.0.1:{port}", *node)
        console.print(f"ray: two-node cluster up in {time.monotonic() - t0:.1f} s")
        spec_path = home / "farm.yaml"
        spec_path.write_text(
            yaml.safe_dump(
                {
                    "ray": {"address": f"127.0.0.1:{port}"},
                    "restart": {"stable_s": 1.0},
                    "sandboxes": [
                        {"kind": "toy", "env": ENVS["toy"], "count": count, "backend": "ray"}
                    ],
                }
            )
        )
        up_s = up_rounds(home, spec_path, rounds, "ray", console)
        client = farm_client_class()(f"unix://{home}/control.sock", holder="bench")
        lease_ns = lease_round_trips(client, "toy", leases)
        replace_s, _ = kill_rounds(
            client, kills, lambda sb: os.kill(sb.pid, signal.SIGKILL), "ray kill", console
        )
        client.close()
    finally:
        farm_cli(home, "down")
        left = stop_cluster(temp_dir)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(temp_dir, ignore_errors=True)
        if left:
            console.print(f"[red]Ray processes left: {left}[/red]")
    lease_us = np.asarray(lease_ns) / 1e3
    return {
        "kind": "toy",
        "env": ENVS["toy"],
        "nodes": 2,
        "up_s": up_s,
        "up_median_s": statistics.median(up_s),
        "lease_release_us": {
            "n": len(lease_us),
            "p50": float(np.percentile(lease_us, 50)),
            "p99": float(np.percentile(lease_us, 99)),
        },
        **replace_summary(replace_s),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", choices=["auto", "browser", "toy"], default="auto")
    p.add_argument("--count", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3, help="farm up rounds")
    p.add_argument("--leases", type=int, default=300, help="lease+release round trips")
    p.add_argument("--kills", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="1 up round, 100 leases, 4 kills")
    p.add_argument(
        "--docker",
        choices=["auto", "off"],
        default="auto",
        help="also run the docker backend when a daemon and an image are there (default)",
    )
    p.add_argument(
        "--ray",
        choices=["auto", "off"],
        default="auto",
        help="also run the ray backend on a two-node local cluster when Ray is installed",
    )
    args = p.parse_args()
    if args.quick:
        args.rounds, args.leases, args.kills = 1, 100, 4
    console = Console()
    info = machine_info()
    warn_if_busy(info, console)
    kind, why = choose_kind(args.kind, info)
    env_id = ENVS[kind]
    home = Path(tempfile.mkdtemp(prefix="fb-", dir="/tmp"))
    spec_path = home / "farm.yaml"
    spec_path.write_text(
        yaml.safe_dump(
            {
                "restart": {"stable_s": 1.0},
                "sandboxes": [{"kind": kind, "env": env_id, "count": args.count}],
            }
        )
    )
    console.print(f"{args.count} x {env_id} ({kind}: {why}), state dir {home}")
    t_start = time.monotonic()
    try:
        with ForeignLoad() as load:
            up_s = up_rounds(home, spec_path, args.rounds, "local", console)
            client = farm_client_class()(f"unix://{home}/control.sock", holder="bench")
            lease_ns = lease_round_trips(client, kind, args.leases)
            replace_s, first_reset_s = kill_rounds(
                client,
                args.kills,
                lambda sb: os.kill(sb.pid, signal.SIGKILL),
                "kill",
                console,
                first_reset=True,
            )
            restarts = sum(s.restarts for s in client.status().sandboxes)
            client.close()
            farm_cli(home, "down")
            dkind, dwhy = docker_kind(kind) if args.docker == "auto" else (None, "--docker off")
            console.print(f"docker backend: {dkind or 'skipped'} ({dwhy})")
            docker_result = (
                docker_rounds(dkind, args.count, args.rounds, args.kills, console)
                if dkind
                else None
            )
            try:
                import ray  # noqa: F401

                ray_why = "two-node cluster on 127.0.0.1"
            except ImportError:
                ray_why = "Ray is not installed (pip install 'farm[ray]')"
            if args.ray == "off":
                ray_why = "--ray off"
            ray_result = (
                ray_rounds(args.count, args.rounds, args.leases, args.kills, console)
                if ray_why.startswith("two-node")
                else None
            )
            console.print(f"ray backend: {'measured' if ray_result else 'skipped'} ({ray_why})")
            wall = time.monotonic() - t_start
            info["foreign_cpu_fraction"] = ForeignLoad.fraction(load.cpu_s(), wall)
    finally:
        farm_cli(home, "down")
        shutil.rmtree(home, ignore_errors=True)

    lease_us = np.asarray(lease_ns) / 1e3
    result = {
        "kind": kind,
        "env": env_id,
        "count": args.count,
        "kind_reason": why,
        "up_s": up_s,
        "up_median_s": statistics.median(up_s),
        "lease_release_us": {
            "n": len(lease_us),
            "p50": float(np.percentile(lease_us, 50)),
            "p90": float(np.percentile(lease_us, 90)),
            "p99": float(np.percentile(lease_us, 99)),
        },
        **replace_summary(replace_s),
        "first_reset_after_kill_s": first_reset_s,
        "first_reset_after_kill_p50_s": float(np.percentile(first_reset_s, 50)),
        "restarts_reported": restarts,
        "docker": docker_result,
        "docker_reason": dwhy,
        "ray": ray_result,
        "ray_reason": ray_why,
        "machine": info,
    }
    table = Table("measure", "value", "samples", title=f"orchestration, local backend: {env_id}")
    table.add_row(
        f"farm up --detach -> {args.count} healthy (median)",
        f"{result['up_median_s']:.2f} s",
        ", ".join(f"{x:.2f}" for x in up_s),
    )
    lr = result["lease_release_us"]
    table.add_row(
        "lease + release round trip p50 (p99)",
        f"{fmt_us(lr['p50'])} ({fmt_us(lr['p99'])})",
        str(lr["n"]),
    )
    table.add_row(
        "SIGKILL -> replacement healthy p50 (max)",
        f"{result['replace_p50_s']:.2f} s ({result['replace_max_s']:.2f} s)",
        ", ".join(f"{x:.2f}" for x in replace_s),
    )
    table.add_row(
        "SIGKILL -> replacement's first reset returned p50 (max)",
        f"{result['first_reset_after_kill_p50_s']:.2f} s ({max(first_reset_s):.2f} s)",
        ", ".join(f"{x:.2f}" for x in first_reset_s),
    )
    if docker_result is not None:
        d = docker_result
        table.add_row(
            f"docker backend ({d['env']}): farm up -> {args.count} healthy (median)",
            f"{d['up_median_s']:.2f} s",
            ", ".join(f"{x:.2f}" for x in d["up_s"]),
        )
        if d["replace_s"]:
            table.add_row(
                "docker backend: docker kill -> replacement healthy p50 (max)",
                f"{d['replace_p50_s']:.2f} s ({d['replace_max_s']:.2f} s)",
                ", ".join(f"{x:.2f}" for x in d["replace_s"]),
            )
    if ray_result is not None:
        rr = ray_result
        table.add_row(
            f"ray backend ({rr['env']}, 2 nodes): farm up -> {args.count} healthy (median)",
            f"{rr['up_median_s']:.2f} s",
            ", ".join(f"{x:.2f}" for x in rr["up_s"]),
        )
        rl = rr["lease_release_us"]
        table.add_row(
            "ray backend: lease + release round trip p50 (p99)",
            f"{fmt_us(rl['p50'])} ({fmt_us(rl['p99'])})",
            str(rl["n"]),
        )
        if rr["replace_s"]:
            table.add_row(
                "ray backend: SIGKILL of farm serve -> replacement healthy p50 (max)",
                f"{rr['replace_p50_s']:.2f} s ({rr['replace_max_s']:.2f} s)",
                ", ".join(f"{x:.2f}" for x in rr["replace_s"]),
            )
    console.print(table)
    print_foreign_load(console, {**info, "cpu_count": os.cpu_count()})
    path = write_json("orchestration.json", result)
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
