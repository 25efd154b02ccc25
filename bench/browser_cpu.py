"""CPU per MiniWoB++ episode, back to back: can a 2x faster reset and step fit on this machine?

``bench/browser.py`` times resets and steps; this benchmark asks what they cost
in CPU. One stack at a time is open (``--stacks``; default: farm's default env,
farm with ``reuse_page=True``, and the package's Selenium env, the baseline).
Per task it plays two untimed episodes, then ``--episodes`` scripted episodes
back to back (no thinking time), with the same policy and seeds as
``bench/browser.py``, and measures per episode:

* wall time (reset + steps);
* CPU time of every process involved: this process and all its descendants
  (Playwright's driver, Chromium's browser, zygote, renderer and utility
  processes; chromedriver), counting processes that ended during the episode
  through their parent's ``children_user``/``children_system`` times.

It then states the budget that the 2x target leaves (``TARGET_SPEEDUP``): an
episode whose reset and steps are each 2x faster than the baseline's p50 lasts
at most ``budget wall = base reset / 2 + steps x base step / 2 + farm end step``
(the step that ends an episode has no target; farm's own p50 is used), and in
that time ``cores x budget wall`` of CPU exists. A stack whose CPU per episode
exceeds that cannot reach the target back to back, however its work is
scheduled.

Prints a table and writes ``bench/results/browser_cpu.json``.

    .venv/bin/python bench/browser_cpu.py              # 10 episodes per task and stack
    .venv/bin/python bench/browser_cpu.py --episodes 4
"""

from __future__ import annotations

import farm  # isort: skip  # noqa: F401  (gRPC transport settings, as in the other benchmarks)

import argparse
import gc
import os
import statistics
import tempfile
import time
from typing import Any

import psutil
from _common import ForeignLoad, machine_info, print_foreign_load, warn_if_busy, write_json
from browser import (
    BASELINE,
    STACK_FACTORIES,
    TARGET_SPEEDUP,
    TASKS,
    WARMUP_SEED,
    Record,
    package_env_vars,
    run_episode,
)
from rich.console import Console
from rich.table import Table

STACKS = ("farm in-process", "farm in-process (reuse page)", BASELINE)


def tree_cpu_s() -> float:
    """CPU seconds of this process and its descendants, ended ones included (see module doc)."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _p50_ms(ns: list[int]) -> float | None:
    return statistics.median(ns) / 1e6 if ns else None


def measure(stack_name: str, task: str, episodes: int, sock_dir: str) -> dict[str, Any]:
    with STACK_FACTORIES[stack_name](task, sock_dir) as stack:
        for _ in range(2):
            run_episode(stack, task, WARMUP_SEED, None)
        gc.collect()
        rec = Record()
        cpu0, wall0 = tree_cpu_s(), time.perf_counter()
        for seed in range(episodes):
            run_episode(stack, task, seed, rec, 0.0)
        wall = time.perf_counter() - wall0
        cpu = tree_cpu_s() - cpu0
    return {
        "task": task,
        "stack": stack_name,
        "episodes": rec.episodes,
        "solved": rec.solved,
        "steps_per_episode": (len(rec.step_ns) + len(rec.end_step_ns)) / max(rec.episodes, 1),
        "nonfinal_steps_per_episode": len(rec.step_ns) / max(rec.episodes, 1),
        "wall_ms_per_episode": wall * 1000 / max(rec.episodes, 1),
        "cpu_ms_per_episode": cpu * 1000 / max(rec.episodes, 1),
        "reset_p50_ms": _p50_ms(rec.reset_ns),
        "step_p50_ms": _p50_ms(rec.step_ns),
        "end_step_p50_ms": _p50_ms(rec.end_step_ns),
    }


def budgets(rows: list[dict[str, Any]], cores: int) -> None:
    """Add the 2x budget (module doc) to every non-baseline row, in place."""
    base = {r["task"]: r for r in rows if r["stack"] == BASELINE}
    for r in rows:
        b = base.get(r["task"])
        if r["stack"] == BASELINE or b is None or b["reset_p50_ms"] is None:
            continue
        wall = b["reset_p50_ms"] / TARGET_SPEEDUP + (r["end_step_p50_ms"] or 0.0)
        if b["step_p50_ms"] is not None:
            wall += r["nonfinal_steps_per_episode"] * b["step_p50_ms"] / TARGET_SPEEDUP
        r["budget_wall_ms"] = wall
        r["budget_cpu_ms"] = cores * wall
        r["fits_budget"] = r["cpu_ms_per_episode"] <= r["budget_cpu_ms"]


def render(rows: list[dict[str, Any]], cores: int, console: Console) -> None:
    table = Table(
        title=f"CPU per MiniWoB++ episode, back to back ({cores} CPUs; all processes)",
        title_style="bold",
    )
    for col in ("task", "stack", "steps", "wall/ep", "CPU/ep", "reset p50", "step p50"):
        table.add_column(col, justify="left" if col in ("task", "stack") else "right")
    table.add_column(f"{TARGET_SPEEDUP:g}x budget: wall / CPU", justify="right")
    table.add_column("CPU fits?", justify="right")

    def ms(v: float | None) -> str:
        return "" if v is None else f"{v:.0f} ms"

    for r in rows:
        fits = r.get("fits_budget")
        table.add_row(
            r["task"],
            r["stack"],
            f"{r['steps_per_episode']:.1f}",
            ms(r["wall_ms_per_episode"]),
            ms(r["cpu_ms_per_episode"]),
            ms(r["reset_p50_ms"]),
            ms(r["step_p50_ms"]),
            f"{r['budget_wall_ms']:.0f} / {r['budget_cpu_ms']:.0f} ms" if fits is not None else "",
            "" if fits is None else ("yes" if fits else "[red]no[/]"),
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CPU per MiniWoB++ episode (see module doc)")
    parser.add_argument("--episodes", type=int, default=10, help="timed episodes per task/stack")
    parser.add_argument("--stacks", default=",".join(STACKS), help="comma-separated stacks")
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks")
    parser.add_argument("--json", default="browser_cpu.json", help="file name under bench/results/")
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 150))
    stacks = [s.strip() for s in args.stacks.split(",") if s.strip()]
    unknown = [s for s in stacks if s not in STACK_FACTORIES]
    if unknown:
        parser.error(f"unknown stacks {unknown}; choose from {sorted(STACK_FACTORIES)}")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    package_env_vars()
    info = machine_info()
    warn_if_busy(info, console)
    cores = len(os.sched_getaffinity(0))
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="farm-bench-") as sock_dir, ForeignLoad() as foreign:
        for task in tasks:
            for name in stacks:
                row = measure(name, task, args.episodes, sock_dir)
                rows.append(row)
                console.print(
                    f"{task:17s} {name:30s} wall/ep {row['wall_ms_per_episode']:6.1f} ms  "
                    f"CPU/ep {row['cpu_ms_per_episode']:6.1f} ms  "
                    f"solved {row['solved']}/{row['episodes']}"
                )
        info["foreign_cpu_fraction"] = foreign.fraction(foreign.cpu_s(), time.monotonic() - t0)
    budgets(rows, cores)
    render(rows, cores, console)
    print_foreign_load(console, info)
    path = write_json(
        args.json,
        {
            "benchmark": "browser_cpu",
            "machine": info,
            "config": {
                "episodes": args.episodes,
                "stacks": stacks,
                "tasks": tasks,
                "baseline": BASELINE,
                "cores": cores,
                "target_speedup": TARGET_SPEEDUP,
            },
            "rows": rows,
        },
    )
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
