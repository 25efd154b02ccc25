"""``farm submit JOB.yaml``: run an online RL job (``--resume RUN_DIR`` continues one).

The job runs in this process (or on the farm's Ray cluster: ``runtime: ray``),
shows live progress, writes ``metrics.jsonl``, TensorBoard events, checkpoints
and ``learning_curve.png`` into its run directory, and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from farm.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("submit", help="run an online RL job (trainer)")
    p.add_argument("job", nargs="?", help="the job spec (YAML); default with --resume: its copy")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    p.add_argument("--run-dir", help="override the spec's run_dir")
    p.add_argument("--minutes", type=float, help="override budget.minutes")
    p.add_argument("--steps", type=int, help="override budget.learner_steps")
    p.add_argument("--no-progress", action="store_true", help="no live progress display")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--eval-only",
        action="store_true",
        help="only evaluate the spec's policy greedily on its held-out seeds (no training)",
    )
    p.set_defaults(func=run)


def _budget(spec: Any, args: argparse.Namespace) -> Any:
    budget = spec.budget.model_dump()
    if args.minutes is not None:
        budget["minutes"] = args.minutes
    if args.steps is not None:
        budget["learner_steps"] = args.steps
    data = spec.model_dump()
    data["budget"] = budget
    from trainer.api.spec import parse_spec

    return parse_spec(data, "job spec (with overrides)")


def run(args: argparse.Namespace) -> int:
    from trainer.api.spec import load_spec

    if args.resume:
        run_dir = Path(args.resume)
        spec = load_spec(args.job or run_dir / "job.yaml")
    elif args.job:
        spec = load_spec(args.job)
        run_dir = Path(args.run_dir) if args.run_dir else spec.resolved_run_dir()
    else:
        raise ConfigError("farm submit: give a job spec (farm submit JOB.yaml) or --resume RUN_DIR")
    spec = _budget(spec, args)
    if args.eval_only:
        from trainer.infra.job import Job

        record = Job(spec, run_dir=run_dir, progress=not args.no_progress).run_eval()
        print(json.dumps(record) if args.json else json.dumps(record, indent=2))
        return 0
    from trainer.infra.runner import submit

    result = submit(spec, run_dir=run_dir, resume=bool(args.resume), progress=not args.no_progress)
    summary = result.summary()
    (run_dir / "result.json").write_text(json.dumps(summary, indent=2))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
    return 0


def _print_summary(s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"job finished: {s['stop_reason']}", show_header=True)
    t.add_column("eval")
    t.add_column("version", justify="right")
    t.add_column("minutes", justify="right")
    t.add_column("greedy success", justify="right")
    for e in s["evals"]:
        t.add_row(
            e["label"], str(e["version"]), f"{e['elapsed_s'] / 60:.1f}", f"{e['success']:.2f}"
        )
    console = Console(file=sys.stdout)
    console.print(t)
    if s["evals"]:
        per = s["evals"][-1]["per_task"]
        console.print("final per task: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items()))
    console.print(
        f"policy version {s['version']}, {s['episodes']} episodes, {s['samples']} samples, "
        f"learner utilisation {100 * s['learner_utilisation']:.0f}%; run dir {s['run_dir']}"
    )
