"""Which MiniWoB++ pages keep drawing while idle: Chromium's idle CPU per task, 60 Hz vs on demand.

farm's browser sandbox draws frames on demand (``--disable-frame-rate-limit``) for
tasks declared ``still``, so that a screenshot does not wait for a 60 Hz tick. On a
page that animates without end, frames on demand are drawn as fast as the CPU
allows; such tasks are listed in ``env_adapters.browser.miniwob.ANIMATED_TASKS`` and
keep 60 Hz. This benchmark is the evidence behind that list.

For every task (or ``--tasks``): reset with seed 0 in two sandboxes (frames on
demand, and 60 Hz; no spare contexts, so nothing else runs in the browser), wait
``--settle`` s, then measure the CPU time of the whole Chromium process tree
(``ChromiumSandbox.cpu_seconds``: browser, renderer, GPU, utility processes)
over two halves of a ``--window`` s stretch of doing nothing, as CPU cores, and keep the lower half
(a page that animates draws in both; one-off work, such as the last context
closing, falls in one). A task whose on-demand idle CPU reaches ``--threshold``
cores is *animated*. The script prints a table and writes
``bench/results/miniwob_frames.json``, and exits 1 if its verdicts disagree with
``ANIMATED_TASKS``.

    .venv/bin/python bench/miniwob_frames.py                    # every task, ~12 min
    .venv/bin/python bench/miniwob_frames.py --tasks chase-circle,click-button
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from _common import machine_info, write_json
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from env_adapters.browser import miniwob as M


async def idle_cores(env: M.BrowserEnv, task: str, settle_s: float, window_s: float) -> float:
    spec = M.task_spec(task)
    env.set_task(spec, M.MiniWoBTask(spec))
    await env.areset(seed=0)
    await asyncio.sleep(settle_s)
    if env.sandbox.browser_pid is None:
        raise RuntimeError("the browser process id is unknown")
    rates = []
    for _ in range(2):  # the lower of two windows: one-off work (a context closing) is not drawing
        c0, t0 = env.sandbox.cpu_seconds(), time.perf_counter()
        await asyncio.sleep(window_s / 2)
        rates.append((env.sandbox.cpu_seconds() - c0) / (time.perf_counter() - t0))
    return min(rates)


async def scan(
    tasks: list[str], settle_s: float, window_s: float, console: Console
) -> list[dict[str, Any]]:
    envs = {
        mode: M.make_env(tasks[0], unthrottled_frames=(mode == "on demand"), spare_contexts=False)
        for mode in ("on demand", "60 Hz")
    }
    rows = []
    try:
        with Progress(console=console, transient=True) as progress:
            bar = progress.add_task("idle CPU per task", total=len(tasks))
            for i, task in enumerate(tasks):
                row: dict[str, Any] = {"task": task}
                modes = list(envs) if i % 2 == 0 else list(reversed(envs))  # spread drift
                for mode in modes:
                    try:
                        row[mode] = await idle_cores(envs[mode], task, settle_s, window_s)
                    except Exception as e:  # noqa: BLE001 - reported in the table
                        row[mode] = None
                        row.setdefault("errors", []).append(f"{mode}: {type(e).__name__}: {e}")
                rows.append(row)
                progress.advance(bar)
    finally:
        for env in envs.values():
            await env.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    p.add_argument("--settle", type=float, default=0.5, help="seconds after reset (0.5)")
    p.add_argument("--window", type=float, default=1.5, help="seconds measured (1.5)")
    p.add_argument("--threshold", type=float, default=0.15, help="cores that mean animated")
    p.add_argument("--json", default="miniwob_frames.json", help="file name under bench/results/")
    args = p.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] or list(M.TASKS)
    unknown = [t for t in tasks if t not in M.TASKS]
    if unknown:
        p.error(f"unknown MiniWoB tasks: {unknown}")
    console = Console(width=max(Console().width, 110))
    rows = asyncio.run(scan(tasks, args.settle, args.window, console))

    disagree = []
    for r in rows:
        on_demand = r["on demand"]
        r["animated"] = None if on_demand is None else on_demand >= args.threshold
        r["listed_animated"] = r["task"] in M.ANIMATED_TASKS
        if r["animated"] is not None and r["animated"] != r["listed_animated"]:
            disagree.append(r["task"])
    table = Table(title=f"Chromium idle CPU (cores) after reset, {args.window:g} s window")
    for col in ("task", "on demand", "60 Hz", "animated", "in ANIMATED_TASKS"):
        table.add_column(col, justify="left" if col == "task" else "right")
    shown = [r for r in rows if r["animated"] or r["listed_animated"] or r.get("errors")]
    for r in shown if len(rows) > 20 else rows:
        table.add_row(
            r["task"],
            "error" if r["on demand"] is None else f"{r['on demand']:.3f}",
            "error" if r["60 Hz"] is None else f"{r['60 Hz']:.3f}",
            str(r["animated"]),
            str(r["listed_animated"]),
        )
    console.print(table)
    still = [r["on demand"] for r in rows if r["on demand"] is not None and not r["animated"]]
    if still:
        console.print(
            f"{len(still)} still tasks: idle CPU with frames on demand, median "
            f"{sorted(still)[len(still) // 2]:.3f} cores, max {max(still):.3f}"
        )
    if disagree:
        console.print(f"[red]verdicts that disagree with ANIMATED_TASKS:[/] {disagree}")
    path = write_json(
        args.json,
        {
            "machine": machine_info(),
            "threshold_cores": args.threshold,
            "settle_s": args.settle,
            "window_s": args.window,
            "rows": rows,
            "disagree_with_animated_tasks": disagree,
        },
    )
    console.print(f"wrote {path}")
    return 1 if disagree else 0


if __name__ == "__main__":
    raise SystemExit(main())
