"""Recording overhead on MiniWoB++ step latency: ``farm serve`` with and without ``--record``.

Two ``farm serve miniwob/<task>`` child processes per task on unix sockets, one
plain and one with ``--record DIR`` (the episode store in a temporary directory
on the local disk; every record fsynced, frames PNG-encoded on the recorder's
background thread). The same scripted oracle
(``env_adapters/browser/oracles.py``) plays the same seeds on both through
``farm.connect``, in interleaved rounds (one episode per server per round,
alternating which goes first), back to back (no think time: the worst case
for the background writer, which then competes with the sandbox for the CPUs).
Every step is timed (one ``perf_counter_ns`` pair around ``env.step``); resets
are timed apart. Per task, the ratio of median step latencies (recording /
plain); the headline is their geometric mean over the tasks (target: under
1.10), with the largest per-task ratio beside it. The median of all steps
pooled is shown for reference only: the tasks' steps take about 50 ms or about
80 ms, so the pooled median falls between the two groups and swings with
their mix.

Prints a table and writes ``bench/results/recording.json``.

    .venv/bin/python bench/recording.py            # 12 episodes per task and server
    .venv/bin/python bench/recording.py --quick    # 4 episodes
"""

from __future__ import annotations

# farm first, as in the other benchmarks (it tunes gRPC's transport before grpc loads).
import farm  # isort: skip

import argparse
import os
import tempfile
import time
from typing import Any

import numpy as np
from _common import (
    ForeignLoad,
    fmt_us,
    machine_info,
    print_foreign_load,
    summarize_ns,
    warn_if_busy,
    write_json,
)
from rich.console import Console
from rich.table import Table

from env_adapters.browser.oracles import oracle_for
from farm.recording import EpisodeStore
from farm.server.process import ServerProcess

TASKS = (
    "miniwob/click-checkboxes",
    "miniwob/enter-text",
    "miniwob/login-user",
    "miniwob/click-button-sequence",
)
STACKS = ("plain", "record")


def play(env: Any, task: str, seed: int) -> tuple[int, list[int], float]:
    """One oracle episode; ``(reset_ns, step_ns list, total reward)``."""
    oracle = oracle_for(task)
    oracle.reset()
    t0 = time.perf_counter_ns()
    obs, _ = env.reset(seed=seed)
    reset_ns = time.perf_counter_ns() - t0
    steps, total = [], 0.0
    for _ in range(60):
        action = oracle.act(obs)
        t0 = time.perf_counter_ns()
        obs, reward, terminated, truncated, _ = env.step(action)
        steps.append(time.perf_counter_ns() - t0)
        total += float(reward)
        if terminated or truncated:
            break
    return reset_ns, steps, total


def time_task(
    task: str, seeds: list[int], sock_dir: str, store: str, console: Console
) -> dict[str, dict[str, Any]]:
    name = task.split("/")[1]
    servers = {
        "plain": ServerProcess(task, address=f"unix://{sock_dir}/{name}-plain.sock"),
        "record": ServerProcess(
            task, address=f"unix://{sock_dir}/{name}-rec.sock", args=["--record", store]
        ),
    }
    out: dict[str, dict[str, Any]] = {
        s: {"reset_ns": [], "step_ns": [], "solved": 0, "episodes": 0} for s in STACKS
    }
    try:
        envs = {}
        for s, srv in servers.items():
            srv.start()
            envs[s] = farm.connect(srv.address)
            play(envs[s], task, 10_000)  # warm-up: browser launched, page cached
        for r, seed in enumerate(seeds):
            order = STACKS if r % 2 == 0 else STACKS[::-1]
            for s in order:
                reset_ns, steps, total = play(envs[s], task, seed)
                rec = out[s]
                rec["reset_ns"].append(reset_ns)
                rec["step_ns"] += steps
                rec["episodes"] += 1
                rec["solved"] += int(total >= 1.0)
        for env in envs.values():
            env.close()
    finally:
        for srv in servers.values():
            srv.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="recording overhead on MiniWoB++ steps (module doc)")
    p.add_argument("--quick", action="store_true", help="4 episodes per task and server")
    p.add_argument("--episodes", type=int, help="timed episodes per task and server (default 12)")
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {TASKS}")
    p.add_argument("--json", default="recording.json", help="file name under bench/results/")
    args = p.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for t in tasks:
        oracle_for(t)  # fails early for a task without an oracle
    episodes = args.episodes or (4 if args.quick else 12)
    seeds = list(range(episodes))

    console = Console(width=max(Console().width, 130))
    info = machine_info()
    warn_if_busy(info, console)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    phases: dict[str, float] = {}
    t_start = time.monotonic()
    store_bytes = 0
    recorded = 0
    with (
        tempfile.TemporaryDirectory(prefix="farm-bench-") as sock_dir,
        tempfile.TemporaryDirectory(
            prefix="farm-bench-store-", dir=os.path.expanduser("~")
        ) as store,
        ForeignLoad() as foreign,
    ):
        for task in tasks:
            t0, f0 = time.monotonic(), foreign.cpu_s()
            results[task] = time_task(task, seeds, sock_dir, store, console)
            phases[task] = foreign.fraction(foreign.cpu_s() - f0, time.monotonic() - t0)
            r = results[task]
            console.print(
                f"{task:30s} step p50 plain {fmt_us(np.median(r['plain']['step_ns']) / 1e3):>9s}"
                f"  record {fmt_us(np.median(r['record']['step_ns']) / 1e3):>9s}"
            )
        wall = time.monotonic() - t_start
        info["foreign_cpu_fraction"] = foreign.fraction(foreign.cpu_s(), wall)
        rows = EpisodeStore(store).list()
        recorded = len(rows)
        incomplete = sum(r["outcome"] == "incomplete" for r in rows)
        for dirpath, _, files in os.walk(store):
            store_bytes += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
        recorded_steps = sum(r["steps"] or 0 for r in rows)
    info["foreign_cpu_fraction_per_task"] = phases

    table = Table(title="MiniWoB++ step latency, farm serve with and without --record")
    for col in ("task", "steps", "plain p50", "record p50", "ratio p50", "plain p90",
                "record p90", "reset plain p50", "reset record p50", "solved"):  # fmt: skip
        table.add_column(col, justify="left" if col == "task" else "right")
    summary: dict[str, Any] = {}
    all_ns: dict[str, list[int]] = {s: [] for s in STACKS}
    for task, r in results.items():
        s_plain, s_rec = summarize_ns(r["plain"]["step_ns"]), summarize_ns(r["record"]["step_ns"])
        rp, rr = summarize_ns(r["plain"]["reset_ns"]), summarize_ns(r["record"]["reset_ns"])
        ratio = s_rec["p50_us"] / s_plain["p50_us"]
        summary[task] = {
            "plain_step": s_plain,
            "record_step": s_rec,
            "plain_reset": rp,
            "record_reset": rr,
            "ratio_p50": ratio,
            "solved": {s: f"{r[s]['solved']}/{r[s]['episodes']}" for s in STACKS},
        }
        for s in STACKS:
            all_ns[s] += r[s]["step_ns"]
        table.add_row(
            task,
            f"{s_plain['n']}/{s_rec['n']}",
            fmt_us(s_plain["p50_us"]),
            fmt_us(s_rec["p50_us"]),
            f"{ratio:.3f}",
            fmt_us(s_plain["p90_us"]),
            fmt_us(s_rec["p90_us"]),
            fmt_us(rp["p50_us"]),
            fmt_us(rr["p50_us"]),
            f"{r['plain']['solved']}+{r['record']['solved']}/{2 * len(seeds)}",
        )
    overall_ratio = float(np.median(all_ns["record"]) / np.median(all_ns["plain"]))
    table.add_row(
        "all steps pooled (reference)",
        f"{len(all_ns['plain'])}/{len(all_ns['record'])}",
        fmt_us(np.median(all_ns["plain"]) / 1e3),
        fmt_us(np.median(all_ns["record"]) / 1e3),
        f"[bold]{overall_ratio:.3f}[/]",
        "",
        "",
        "",
        "",
        "",
    )
    console.print(table)
    console.print(
        f"recorded {recorded} episodes ({incomplete} incomplete), {recorded_steps} steps, "
        f"{store_bytes / 1024:.0f} KiB on disk "
        f"({store_bytes / max(1, recorded_steps + recorded) / 1024:.1f} KiB per observation)"
    )
    ratios = [v["ratio_p50"] for v in summary.values()]
    geomean = float(np.exp(np.mean(np.log(ratios))))
    verdict = "under" if geomean < 1.10 else "NOT under"
    console.print(
        f"overhead: geometric mean of the per-task p50 ratios {100 * (geomean - 1):+.1f}% "
        f"({verdict} the 10% target); largest per-task {100 * (max(ratios) - 1):+.1f}%; "
        f"pooled median of all steps {100 * (overall_ratio - 1):+.1f}% (reference only)"
    )
    print_foreign_load(console, info)
    out = write_json(
        args.json,
        {
            "machine": info,
            "episodes_per_task_and_server": episodes,
            "tasks": summary,
            "overhead_geomean_ratio_p50": geomean,
            "max_task_ratio_p50": max(ratios),
            "pooled_ratio_p50": overall_ratio,
            "store": {
                "episodes": recorded,
                "incomplete": incomplete,
                "steps": recorded_steps,
                "bytes": store_bytes,
            },
        },
    )
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
