"""Do vLLM and the learner agree on log-probabilities? (before and after a weight sync)

``python -m trainer.llm.check MODEL_DIR [--json]``: prompts from ``toy/gui``
observations; vLLM samples answers with the log-probability of every sampled
token; transformers recomputes them (float32); the report gives the largest
absolute difference. Then one optimiser step changes the learner's weights, they
are pushed into the running engine (timed), and the comparison is repeated on new
samples, plus a check that the engine's log-probabilities did change.
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import argparse
import json
import sys
from typing import Any


def run(model: str, *, prompts: int = 6, max_tokens: int = 12, lr: float = 0.05) -> dict[str, Any]:
    import torch

    from env_adapters.toy.gui import TASKS, ToyGuiEnv
    from trainer.llm.engine import VLLMEngine
    from trainer.llm.lm import CausalLM
    from trainer.llm.prompt import build_messages

    lm = CausalLM(model)
    engine = VLLMEngine(model, max_model_len=1024)
    env = ToyGuiEnv(width=160, height=210)
    ids = []
    for i in range(prompts):
        obs, _ = env.reset(seed=i, options={"task": TASKS[i % len(TASKS)]})
        ids.append(lm.prompt_ids(build_messages(obs)))

    def compare() -> tuple[float, list[list[int]], list[list[float]]]:
        gens = engine.generate(ids, max_tokens=max_tokens, stop_token_ids=[lm.eos])
        answers = [g.token_ids for g in gens]
        with torch.no_grad():
            ref = lm.token_logprobs(ids, answers)
        worst = max(
            abs(a - b)
            for i, g in enumerate(gens)
            for a, b in zip(ref[i, : len(g.token_ids)].tolist(), g.logprobs, strict=True)
        )
        return worst, answers, [g.logprobs for g in gens]

    before, answers, engine_lps = compare()
    opt = torch.optim.SGD(lm.model.parameters(), lr=lr)
    loss = -lm.logprobs(ids, [lm.action_ids("click_element(2)")] * len(ids)).mean()
    loss.backward()
    opt.step()
    sync_s = engine.load_weights(lm.model.state_dict(), 1)
    # the same answers under the new weights: the engine must have moved with the learner
    with torch.no_grad():
        moved = lm.token_logprobs(ids, answers)
    regen = engine.llm.generate(
        [{"prompt_token_ids": p} for p in ids],
        [engine._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprobs=0)] * len(ids),
        use_tqdm=False,
    )
    first_changed = max(
        abs(float(next(iter(o.outputs[0].logprobs[0].values())).logprob) - engine_lps[i][0])
        for i, o in enumerate(regen)
    )
    after, _, _ = compare()
    return {
        "model": model,
        "prompts": len(ids),
        "max_abs_diff_before_sync": before,
        "max_abs_diff_after_sync": after,
        "weight_sync_s": sync_s,
        "learner_logprob_change": float(moved[0, : len(answers[0])].sum()),
        "engine_changed_after_sync": first_changed,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m trainer.llm.check", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("model")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tolerance", type=float, default=1e-3)
    args = ap.parse_args(argv)
    report = run(args.model)
    ok = (
        report["max_abs_diff_before_sync"] <= args.tolerance
        and report["max_abs_diff_after_sync"] <= args.tolerance
    )
    report["ok"] = ok
    print(json.dumps(report, indent=None if args.json else 2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
