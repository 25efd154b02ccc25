"""Asynchronous vs synchronous training: the same job with ``eta = 4`` and ``eta = 0``.

Sandboxes: 64 in-process ``toy/gui`` envs whose every step sleeps a heavy-tailed
time (lognormal, median ``--median-ms``, sigma ``--sigma``; resets too), so
episodes vary by an order of magnitude, as real GUI steps do. Policy: the
text-pointer policy at a width that makes a learner step cost about as much as
collecting a batch (``--dim``/``--hidden``), so the learner is the resource
asynchrony must keep busy. Both runs train the same number of learner steps (B
groups of G each: the same number of trained trajectories) on the same tasks and
seeds, then evaluate greedily on held-out seeds.

Reported per run: wall-clock seconds of training, learner utilisation and idle
fraction (time the learner waited for a batch), trained samples, staleness
histogram, and final greedy success (with its binomial standard error); the
headline is the wall-clock speedup ``sync / async``.

    .venv/bin/python bench/trainer_async.py           # ~6 min
    .venv/bin/python bench/trainer_async.py --quick   # ~2 min, fewer steps
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info, warn_if_busy, write_json

from trainer.api.spec import parse_spec
from trainer.infra.job import Job
from trainer.infra.metrics import read

TASKS = ["click-button", "click-link", "click-tab", "click-checkboxes", "enter-text", "focus-text"]


def job_spec(args: argparse.Namespace, eta: int, run_dir: Path) -> Any:
    latency = {"dist": "lognormal", "median_s": args.median_ms / 1000, "sigma": args.sigma}
    return parse_spec(
        {
            "name": f"bench-eta{eta}",
            "run_dir": str(run_dir),
            "seed": args.seed,
            "record": False,
            "sandboxes": {
                "source": "inprocess",
                "kind": "toy",
                "env": "toy/gui",
                "count": args.envs,
                "env_kwargs": {
                    "width": 160,
                    "height": 210,
                    "step_latency": latency,
                    "reset_latency": latency,
                },
            },
            "policy": {"name": "text-pointer", "kwargs": {"dim": args.dim, "hidden": args.hidden}},
            "algorithm": {
                "eta": eta,
                "group_size": 4,
                "redundancy": 1,
                "batch_groups": args.batch_groups,
                "max_running_groups": args.envs // 5,
                "ppo_epochs": 2,
                "max_steps": 6,
                "group_seeds": "distinct",
                "entropy_coef": 0.02,
            },
            "tasks": {
                "train": TASKS,
                "eval": {"episodes_per_task": args.eval_episodes, "every_s": 0, "at_start": False},
            },
            "budget": {"learner_steps": args.steps},
            "checkpoint": {"every_steps": 10_000},
        }
    )


def run(args: argparse.Namespace, eta: int, console: Console) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix=f"farm-bench-eta{eta}-")) / "run"
    spec = job_spec(args, eta, run_dir)
    console.print(f"eta = {eta}: training {args.steps} learner steps ...")
    started = time.monotonic()
    result = Job(spec, progress=False).run()
    total = time.monotonic() - started
    train = [r for r in read(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    last = train[-1]
    final = result.evals[-1]
    n = final["episodes"]
    p = final["success"]
    busy, idle = last["learner_busy_s"], last["learner_idle_s"]
    return {
        "eta": eta,
        "train_s": last["elapsed_s"],
        "total_s": total,
        "learner_steps": result.version,
        "samples": result.samples,
        "trajectories": sum(r["trajectories"] for r in train),
        "episodes": result.episodes,
        "learner_busy_s": busy,
        "learner_idle_s": idle,
        "learner_utilisation": busy / (busy + idle),
        "learner_idle_fraction": idle / last["elapsed_s"],
        "mean_train_step_s": sum(r["train_s"] for r in train) / len(train),
        "staleness_hist": last["staleness_hist"],
        "zero_variance_dropped": last["zero_variance_dropped"],
        "final_success": p,
        "final_success_se": math.sqrt(max(p * (1 - p), 1e-9) / max(1, n)),
        "final_per_task": final["per_task"],
        "eval_episodes": n,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--median-ms", type=float, default=40.0)
    ap.add_argument("--sigma", type=float, default=1.2)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch-groups", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--eval-episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.eval_episodes = 25, 20
    console = Console()
    info = machine_info()
    warn_if_busy(info, console)
    runs = [run(args, 4, console), run(args, 0, console)]
    a, s = runs
    speedup = s["train_s"] / a["train_s"]
    table = Table(title="async (eta=4) vs sync (eta=0): same job, same number of learner steps")
    for col in ("", "async eta=4", "sync eta=0"):
        table.add_column(col, justify="right")
    rows = [
        ("wall-clock training (s)", "train_s", "{:.1f}"),
        ("learner steps", "learner_steps", "{}"),
        ("trained trajectories", "trajectories", "{}"),
        ("trained step samples", "samples", "{}"),
        ("learner utilisation", "learner_utilisation", "{:.0%}"),
        ("learner idle fraction", "learner_idle_fraction", "{:.1%}"),
        ("mean learner step (s)", "mean_train_step_s", "{:.3f}"),
        ("episodes played", "episodes", "{}"),
        ("zero-variance groups dropped", "zero_variance_dropped", "{}"),
    ]
    for label, key, fmt in rows:
        table.add_row(label, fmt.format(a[key]), fmt.format(s[key]))
    table.add_row(
        "final greedy success (held-out)",
        f"{a['final_success']:.2f} ± {a['final_success_se']:.2f}",
        f"{s['final_success']:.2f} ± {s['final_success_se']:.2f}",
    )
    table.add_row(
        "staleness (groups)", json.dumps(a["staleness_hist"]), json.dumps(s["staleness_hist"])
    )
    console.print(table)
    console.print(f"[bold]wall-clock speedup async/sync: {speedup:.2f}x[/bold]")
    out = write_json(
        "trainer_async.json",
        {
            "machine": info,
            "config": vars(args),
            "runs": runs,
            "speedup": speedup,
            "success_diff": a["final_success"] - s["final_success"],
            "success_diff_se": math.hypot(a["final_success_se"], s["final_success_se"]),
        },
    )
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
