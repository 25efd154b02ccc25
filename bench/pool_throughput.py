"""Async pool throughput over latency-injected envs: farm EnvPool vs gymnasium AsyncVectorEnv.

16 ``toy/latency`` envs (``LatencyEnv``) whose steps sleep a heavy-tailed delay
(default lognormal, median 10 ms, sigma 1.0; mean ``median * exp(sigma^2 / 2)``),
each stepped for a fixed wall time after a short warm-up, random actions:

* ``gymnasium AsyncVectorEnv``: 16 ``LatencyEnv`` in subprocesses, lockstep
  ``step`` (every step waits for the slowest of the 16 envs);
* ``farm EnvPool``: the same 16 envs served by ``farm serve toy/latency`` child
  processes, stepped with ``farm.EnvPool``: ``recv`` a batch of ``batch_size``
  finished envs, ``send`` actions for exactly those env ids. Two layouts:

  - ``16x1``: 16 servers, one session each; server ``i`` gets
    ``latency_seed = seed_base + i``, the seed of AsyncVectorEnv's env ``i``, so
    env ``i`` sleeps exactly the same delay sequence in both stacks;
  - ``2x8``: 2 servers, 8 sessions each; ``farm serve`` gives every session of a
    server the same kwargs, so each server gets its own ``latency_seed``
    (``seed_base + server``) and its 8 envs share that server's sequence.

* ``ideal``: the sum of the envs' own rates, ``sum_i 1 / E[t_i]``: analytic
  (``16 / LatencyEnv.mean_delay_s``) and measured (``sum_i n_i / sum(delays_i)``
  over the delays each env actually slept in the window, from ``info["delay_s"]``).

Episodes are long enough that no reset falls in the window, so every counted
step slept exactly one delay. Prints a table and writes
``bench/results/pool_throughput.json``.

    .venv/bin/python bench/pool_throughput.py            # 10 s per stack
    .venv/bin/python bench/pool_throughput.py --quick    # 4 s per stack
"""

from __future__ import annotations

# farm first: it tunes gRPC's transport (GRPC_EXPERIMENTS), which gRPC reads when imported.
# Every stack in the run, dm_env_rpc's client and server included, uses the same setting.
import farm  # isort: skip

import argparse
import contextlib
import functools
import heapq
import json
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
from _common import ForeignLoad, machine_info, warn_if_busy, write_json
from rich.console import Console
from rich.table import Table

from env_adapters.toy.latency import LatencyEnv
from farm.server.process import ServerProcess

EPISODE_LENGTH = 1_000_000_000  # no reset inside the window
MAX_ITERATIONS = 10_000_000  # a hard bound on every loop, besides its wall-time bound
TARGET_VS_ASYNC = 2.0
TARGET_FRACTION_OF_IDEAL = 0.8


def env_kwargs(args: argparse.Namespace, latency_seed: int) -> dict[str, Any]:
    return {
        "dist": args.dist,
        "median_s": args.median_s,
        "sigma": args.sigma,
        "alpha": args.alpha,
        "episode_length": EPISODE_LENGTH,
        "latency_seed": latency_seed,
    }


class Window:
    """Counts steps and per-env delays between ``start()`` and the end of the window."""

    def __init__(self, num_envs: int, foreign: ForeignLoad) -> None:
        self.foreign = foreign
        self.f0 = self.f1 = 0.0
        self.delays: list[list[float]] = [[] for _ in range(num_envs)]
        # every delay each env slept since its reset, warm-up included (to check seeds)
        self.sequence: list[list[float]] = [[] for _ in range(num_envs)]
        self.t0 = 0.0
        self.t1 = 0.0
        self.cpu0 = 0.0
        self.cpu1 = 0.0

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.f0 = self.foreign.cpu_s()

    def stop(self) -> None:
        self.t1 = time.perf_counter()
        self.cpu1 = time.process_time()
        self.f1 = self.foreign.cpu_s()

    def add(self, env_id: int, delay: float, timed: bool = True) -> None:
        self.sequence[env_id].append(delay)
        if timed:
            self.delays[env_id].append(delay)

    def result(self) -> dict[str, Any]:
        elapsed = self.t1 - self.t0
        steps = sum(len(d) for d in self.delays)
        per_env_rates = [len(d) / sum(d) for d in self.delays if d and sum(d) > 0]
        all_delays = [x for d in self.delays for x in d]
        return {
            "steps": steps,
            "elapsed_s": elapsed,
            "steps_per_s": steps / elapsed if elapsed > 0 else 0.0,
            "steps_per_env": [len(d) for d in self.delays],
            "measured_mean_delay_s": float(np.mean(all_delays)) if all_delays else None,
            # sum over envs of each env's own rate, from the delays it actually slept
            "measured_ideal_steps_per_s": float(sum(per_env_rates)),
            "client_cpu_s": self.cpu1 - self.cpu0,
            # CPU share taken by processes outside this benchmark during the window
            "foreign_cpu_fraction": self.foreign.fraction(self.f1 - self.f0, elapsed),
        }


def simulate_ideal(
    args: argparse.Namespace, seeds: list[int], batch_size: int, t_from: float, t_to: float
) -> float:
    """Steps/s in ``[t_from, t_to]`` of a zero-overhead pool with these envs and batch size.

    Every env starts at t=0; ``recv`` hands back the first ``batch_size`` envs to
    finish (waiting until that many have) and they are sent again at once. Env
    ``i`` sleeps the delays of ``LatencyEnv(latency_seed=seeds[i])``, the same
    sequence the benchmarked env sleeps. ``batch_size = num_envs`` is lockstep (a
    perfect AsyncVectorEnv); ``batch_size = 1`` approaches ``sum_i 1 / E[t_i]``.
    """
    envs = [LatencyEnv(**env_kwargs(args, seed)) for seed in seeds]
    running = [(env.sample_delay(), i) for i, env in enumerate(envs)]
    heapq.heapify(running)
    finished: list[float] = []  # finish times of the envs waiting to be received
    ready: list[int] = []
    counted = 0
    for _ in range(MAX_ITERATIONS):
        t, i = heapq.heappop(running)
        if t > t_to:
            break
        finished.append(t)
        ready.append(i)
        if len(ready) >= batch_size:
            counted += sum(1 for f in finished if f >= t_from)
            for j in ready:
                heapq.heappush(running, (t + envs[j].sample_delay(), j))
            finished.clear()
            ready.clear()
    return counted / (t_to - t_from)


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


# ---------------------------------------------------------------- gymnasium AsyncVectorEnv


def run_async_vector_env(
    args: argparse.Namespace, rng: np.random.Generator, foreign: ForeignLoad
) -> dict[str, Any]:
    n = args.num_envs
    fns = [functools.partial(LatencyEnv, **env_kwargs(args, args.seed_base + i)) for i in range(n)]
    # spawn: the parent has grpc imported; never fork it
    envs = gym.vector.AsyncVectorEnv(fns, context="spawn")
    try:
        pids = [p.pid for p in envs.processes]
        envs.reset(seed=0)
        win = Window(n, foreign)
        deadline = time.perf_counter() + args.warmup
        for _ in range(MAX_ITERATIONS):
            if time.perf_counter() >= deadline:
                break
            _, _, _, _, info = envs.step(rng.integers(0, 2, n))
            for i in range(n):
                win.add(i, float(info["delay_s"][i]), timed=False)
        cpu0 = _cpu_seconds(pids)
        win.start()
        deadline = win.t0 + args.duration
        for _ in range(MAX_ITERATIONS):
            _, _, _, _, info = envs.step(rng.integers(0, 2, n))
            for i in range(n):
                win.add(i, float(info["delay_s"][i]))
            if time.perf_counter() >= deadline:
                break
        win.stop()
        result = win.result()
        result["_sequence"] = win.sequence
        result["server_cpu_s"] = _cpu_seconds(pids) - cpu0  # the 16 worker processes
        result["vector_steps"] = result["steps"] // n
    finally:
        envs.close()
    return result


# ---------------------------------------------------------------- farm EnvPool


@contextlib.contextmanager
def farm_servers(args: argparse.Namespace, num_servers: int) -> Iterator[list[ServerProcess]]:
    """``num_servers`` ``farm serve toy/latency`` children, server ``s`` with seed base + s."""
    with contextlib.ExitStack() as stack:
        sock_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="farm-pool-"))
        servers = [
            ServerProcess(
                "toy/latency",
                address=f"unix://{sock_dir}/latency-{s}.sock"
                if args.transport == "unix"
                else "127.0.0.1:0",
                env_kwargs=json.dumps(env_kwargs(args, args.seed_base + s)),
                startup_timeout_s=60.0,
            )
            for s in range(num_servers)
        ]
        for srv in servers:
            stack.callback(srv.__exit__, None, None, None)
        with ThreadPoolExecutor(max_workers=min(8, num_servers)) as ex:
            list(ex.map(lambda srv: srv.start(), servers))
        yield servers


def run_farm_pool(
    args: argparse.Namespace,
    addresses: list[str],
    pids: list[int],
    batch_size: int,
    seed: int,
    foreign: ForeignLoad,
) -> dict[str, Any]:
    n = args.num_envs
    rng = np.random.default_rng(seed)
    pool = farm.EnvPool(addresses, num_envs=n, batch_size=batch_size)
    try:
        pool.reset(seed=0)
        pool.send(rng.integers(0, 2, n), np.arange(n))
        win = Window(n, foreign)
        deadline = time.perf_counter() + args.warmup
        for _ in range(MAX_ITERATIONS):
            if time.perf_counter() >= deadline:
                break
            _, _, _, _, info = pool.recv()
            ids = info["env_id"]
            for i, env_info in zip(ids.tolist(), info["infos"], strict=True):
                win.add(i, float(env_info["delay_s"]), timed=False)
            pool.send(rng.integers(0, 2, len(ids)), ids)
        cpu0 = _cpu_seconds(pids)
        win.start()
        deadline = win.t0 + args.duration
        recvs = 0
        for _ in range(MAX_ITERATIONS):
            _, _, _, _, info = pool.recv()
            recvs += 1
            ids = info["env_id"]
            for i, env_info in zip(ids.tolist(), info["infos"], strict=True):
                win.add(i, float(env_info["delay_s"]))
            if time.perf_counter() >= deadline:
                break
            pool.send(rng.integers(0, 2, len(ids)), ids)
        win.stop()
        result = win.result()
        result["_sequence"] = win.sequence
        result["server_cpu_s"] = _cpu_seconds(pids) - cpu0
        result["recv_calls"] = recvs
    finally:
        pool.close()
    return result


# ---------------------------------------------------------------- output


def fraction(x: float, ideal: float) -> float | None:
    return x / ideal if ideal else None


def render(rows: list[dict[str, Any]], meta: dict[str, Any], console: Console) -> None:
    info = meta["machine"]
    cfg = meta["config"]
    table = Table(
        title=f"pool throughput: {cfg['num_envs']} envs, {cfg['dist']} median "
        f"{cfg['median_s'] * 1e3:g} ms sigma {cfg['sigma']:g} (mean "
        f"{cfg['analytic_mean_delay_s'] * 1e3:.2f} ms), {cfg['duration_s']:g} s per stack, "
        f"{info['cpu_count']} CPUs, {info['date']}"
    )
    for col in (
        "stack",
        "batch",
        "steps/s",
        "vs AsyncVectorEnv",
        "of ideal",
        "of analytic ideal",
        "of batch sim ideal",
        "CPU s/s cli+srv",
        "others' CPU",
        "target",
    ):
        table.add_column(col, justify="left" if col == "stack" else "right")
    for r in rows:
        if "error" in r:
            table.add_row(r["stack"], str(r.get("batch_size", "")), "error", r["error"][:60])
            continue
        if r["stack"].startswith("ideal"):
            table.add_row(
                r["stack"], "", f"{r['steps_per_s']:.0f}", "", "", "1.000", "", "", "", ""
            )
            continue
        target = ""
        if "meets_targets" in r:
            ok = r["meets_targets"]
            target = "[green]PASS[/]" if ok else "[red]FAIL[/]"
        cpu = f"{r['client_cpu_s'] / r['elapsed_s']:.2f} + {r['server_cpu_s'] / r['elapsed_s']:.2f}"
        table.add_row(
            r["stack"],
            str(r.get("batch_size", "")),
            f"{r['steps_per_s']:.0f}",
            f"{r['ratio_vs_async_vector_env']:.2f}x",
            f"{r['fraction_of_measured_ideal']:.3f}",
            f"{r['fraction_of_analytic_ideal']:.3f}",
            f"{r['fraction_of_simulated_ideal']:.3f}",
            cpu,
            f"{r['foreign_cpu_fraction']:.0%}",
            target,
        )
    console.print(table)
    console.print(
        "of ideal: steps/s / sum_i n_i / sum(delays_i) over the delays each env slept in the "
        "window; of analytic ideal: / (16 / mean_delay_s); of batch sim ideal: / a zero-overhead "
        "pool with the same delay sequences and batch size (16 = lockstep); target: >= "
        f"{TARGET_VS_ASYNC:g}x AsyncVectorEnv and >= {TARGET_FRACTION_OF_IDEAL:g} of ideal; "
        "others' CPU: share of the CPUs used by processes outside the benchmark in the window",
        style="dim",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="async pool throughput (see module doc)")
    p.add_argument("--quick", action="store_true", help="4 s per stack instead of 10")
    p.add_argument("--duration", type=float, help="timed seconds per stack (default 10, quick 4)")
    p.add_argument("--warmup", type=float, help="untimed seconds first (default 1, quick 0.5)")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--batch-sizes", default="1,4,8", help="farm EnvPool batch sizes")
    p.add_argument(
        "--layouts", default="16x1,2x8", help="farm layouts SERVERSxSESSIONS, comma-separated"
    )
    p.add_argument("--transport", choices=["tcp", "unix"], default="unix")
    p.add_argument("--dist", default="lognormal", choices=["lognormal", "pareto", "constant"])
    p.add_argument("--median-s", type=float, default=0.01)
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--alpha", type=float, default=1.5)
    p.add_argument("--seed-base", type=int, default=1000, help="env i: latency_seed base + i")
    p.add_argument("--json", default="pool_throughput.json", help="file name under bench/results/")
    args = p.parse_args(argv)
    args.duration = args.duration or (4.0 if args.quick else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 1.0)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    layouts = []
    for spec in args.layouts.split(","):
        servers, _, sessions = spec.strip().partition("x")
        if int(servers) * int(sessions) != args.num_envs:
            p.error(f"layout {spec!r} does not make {args.num_envs} envs")
        layouts.append((int(servers), int(sessions)))

    console = Console(width=max(Console().width, 160))
    info = machine_info()
    warn_if_busy(info, console)
    mean_delay = LatencyEnv(**env_kwargs(args, 0)).mean_delay_s
    analytic_ideal = args.num_envs / mean_delay
    t_start = time.monotonic()
    rows: list[dict[str, Any]] = []

    with ForeignLoad() as foreign:
        console.print(f"gymnasium AsyncVectorEnv, {args.num_envs} subprocesses ...")
        avec = run_async_vector_env(args, np.random.default_rng(1), foreign)
        avec.update(stack="gymnasium AsyncVectorEnv", batch_size=args.num_envs)
        avec_sequence = avec["_sequence"]
        rows.append(avec)
        console.print(f"  {avec['steps_per_s']:.0f} steps/s")

        for servers, sessions in layouts:
            label = f"farm EnvPool {servers}x{sessions}"
            console.print(f"{label}: starting {servers} `farm serve toy/latency` ...")
            try:
                with farm_servers(args, servers) as procs:
                    addresses = [srv.address for srv in procs]
                    pids = [srv.pid for srv in procs]
                    for b in batch_sizes:
                        try:
                            r = run_farm_pool(args, addresses, pids, b, seed=1, foreign=foreign)
                        except Exception as e:  # noqa: BLE001 - report, keep going
                            r = {"error": f"{type(e).__name__}: {e}"}
                        r.update(stack=label, batch_size=b, servers=servers, sessions=sessions)
                        rows.append(r)
                        if "error" in r:
                            console.print(f"  [red]batch {b} failed:[/] {r['error']}")
                        else:
                            console.print(f"  batch {b}: {r['steps_per_s']:.0f} steps/s")
            except Exception as e:  # noqa: BLE001
                rows.append({"stack": label, "error": f"{type(e).__name__}: {e}"})
                console.print(f"  [red]{label} failed:[/] {e}")
        info["foreign_cpu_fraction"] = foreign.fraction(
            foreign.cpu_s(), time.monotonic() - foreign.t0
        )

    for r in rows:
        if "error" in r:
            continue
        seq = r.pop("_sequence")
        if r is not avec:
            # did env i sleep the same delays as AsyncVectorEnv's env i (same seed)?
            same = [
                bool(np.allclose(a[: min(len(a), len(b))], b[: min(len(a), len(b))]))
                for a, b in zip(seq, avec_sequence, strict=True)
            ]
            r["envs_with_same_delay_sequence_as_async_vector_env"] = sum(same)
        r["client_cpu_us_per_step"] = r["client_cpu_s"] / r["steps"] * 1e6
        r["server_cpu_us_per_step"] = r["server_cpu_s"] / r["steps"] * 1e6
        r["ratio_vs_async_vector_env"] = r["steps_per_s"] / avec["steps_per_s"]
        if r is avec:
            seeds = [args.seed_base + i for i in range(args.num_envs)]
        else:
            seeds = [args.seed_base + i % r["servers"] for i in range(args.num_envs)]
        r["simulated_ideal_steps_per_s"] = simulate_ideal(
            args, seeds, r["batch_size"], args.warmup, args.warmup + args.duration
        )
        r["fraction_of_simulated_ideal"] = r["steps_per_s"] / r["simulated_ideal_steps_per_s"]
        r["fraction_of_analytic_ideal"] = fraction(r["steps_per_s"], analytic_ideal)
        r["fraction_of_measured_ideal"] = fraction(
            r["steps_per_s"], r["measured_ideal_steps_per_s"]
        )
        if r["stack"].startswith("farm"):
            r["meets_targets"] = (
                r["ratio_vs_async_vector_env"] >= TARGET_VS_ASYNC
                and r["fraction_of_measured_ideal"] >= TARGET_FRACTION_OF_IDEAL
            )
    rows.append({"stack": f"ideal ({args.num_envs} / mean delay)", "steps_per_s": analytic_ideal})

    meta = {
        "benchmark": "pool_throughput",
        "machine": info,
        "config": {
            "num_envs": args.num_envs,
            "dist": args.dist,
            "median_s": args.median_s,
            "sigma": args.sigma,
            "alpha": args.alpha,
            "analytic_mean_delay_s": mean_delay,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "batch_sizes": batch_sizes,
            "layouts": [f"{s}x{k}" for s, k in layouts],
            "transport": args.transport,
            "seed_base": args.seed_base,
            "latency_seeds": {
                "gymnasium AsyncVectorEnv": "env i: seed_base + i",
                "farm 16x1": "server i (= pool env i): seed_base + i",
                "farm 2x8": "server s: seed_base + s, shared by its 8 sessions",
            },
            "episode_length": EPISODE_LENGTH,
            "wall_s": time.monotonic() - t_start,
        },
        "targets": {
            "ratio_vs_async_vector_env": TARGET_VS_ASYNC,
            "fraction_of_measured_ideal": TARGET_FRACTION_OF_IDEAL,
        },
        "analytic_ideal_steps_per_s": analytic_ideal,
        "rows": rows,
    }
    info["loadavg_at_end"] = list(os.getloadavg())
    render(rows, meta, console)
    out = write_json(args.json, meta)
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
