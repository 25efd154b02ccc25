"""Do vLLM and the learner agree on log-probabilities? (before and after a weight sync)

``python -m trainer.llm.check MODEL_DIR [--json]``: prompts from ``toy/gui``
observations; vLLM samples answers with the log-probability of every sampled
token; transformers recomputes them (float32); the report gives the largest
absolute difference. Then one optimiser step changes the learner's weights, they
are pushed into the running engine (timed), and the comparison is repeated on new
samples, plus a check that the engine's log-probabilities did change, and the
median time of a generate call (``max_tokens`` tokens per prompt, 1 prompt and all).

For a vision-language model (:func:`~trainer.llm.lm.is_multimodal`) every prompt
carries its observation's screenshot: the report adds whether vLLM expanded the
image placeholders into the same token ids as the learner (``prompt_ids_match``)
and how much the engine's first-token log-probability moves when the image is
inverted (``engine_image_effect``: > 0, the pixels reach the model).

``--policy`` checks the same through the policy: an actor copy of
:class:`~trainer.llm.policy.LMPolicy` (vLLM) acts on ``toy/gui`` observations
(twice, the second time with the first action in the history), its learner copy
recomputes ``log pi(action | context)`` from the samples' contexts (for a
vision-language model: the prompt ids and the downscaled screenshot), before and
after a weight sync through ``set_weights``.
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import argparse
import json
import sys
from typing import Any


def run(
    model: str, *, prompts: int = 6, max_tokens: int = 12, lr: float = 0.05, repeats: int = 7
) -> dict[str, Any]:
    import time

    import numpy as np
    import torch

    from env_adapters.toy.gui import TASKS, ToyGuiEnv
    from trainer.llm.engine import VLLMEngine, prompt_inputs
    from trainer.llm.lm import CausalLM, VisionLM, is_multimodal
    from trainer.llm.prompt import PromptConfig, build_messages, prompt_image

    vision = is_multimodal(model)
    lm = VisionLM(model) if vision else CausalLM(model)
    started = time.perf_counter()
    engine = VLLMEngine(model, max_model_len=1024, max_images=1 if vision else None)
    engine_start_s = time.perf_counter() - started
    env = ToyGuiEnv(width=160, height=210)
    cfg = PromptConfig(image=vision)
    ids: list[list[int]] = []
    images: list[Any] = []
    for i in range(prompts):
        obs, _ = env.reset(seed=i, options={"task": TASKS[i % len(TASKS)]})
        ids.append(lm.prompt_ids(build_messages(obs, (), cfg)))
        images.append(prompt_image(obs, cfg))
    imgs = images if vision else None

    def score(answers: list[list[int]]) -> Any:
        with torch.no_grad():
            if isinstance(lm, VisionLM):
                return lm.token_logprobs(ids, answers, imgs)
            return lm.token_logprobs(ids, answers)

    generate_s: list[float] = []

    def compare() -> tuple[float, list[list[int]], list[list[float]], list[list[int]]]:
        t0 = time.perf_counter()
        gens = engine.generate(ids, max_tokens=max_tokens, stop_token_ids=[lm.eos], images=imgs)
        generate_s.append(time.perf_counter() - t0)
        answers = [g.token_ids for g in gens]
        ref = score(answers)
        worst = max(
            abs(a - b)
            for i, g in enumerate(gens)
            for a, b in zip(ref[i, : len(g.token_ids)].tolist(), g.logprobs, strict=True)
        )
        return worst, answers, [g.logprobs for g in gens], [g.prompt_token_ids for g in gens]

    def first_token(images_: Any) -> list[float]:
        outs = engine.llm.generate(
            prompt_inputs(ids, images_),
            [engine._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprobs=0)] * len(ids),
            use_tqdm=False,
        )
        return [float(next(iter(o.outputs[0].logprobs[0].values())).logprob) for o in outs]

    def timed_generate(n: int, times: int) -> float:
        """Median seconds of a generate call on the first n prompts (max_tokens each), with
        new screenshots every call (a changed corner: no cached image encoding)."""
        rng = np.random.default_rng(0)
        took = []
        for _ in range(times):
            fresh = None
            if imgs is not None:
                fresh = [im.copy() for im in imgs[:n]]
                for im in fresh:
                    im[:4, :4] = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
            t0 = time.perf_counter()
            engine.generate(ids[:n], max_tokens=max_tokens, images=fresh, stop_token_ids=[])
            took.append(time.perf_counter() - t0)
        return float(np.median(took))

    before, answers, engine_lps, engine_prompts = compare()
    report: dict[str, Any] = {"model": model, "vision": vision, "prompts": len(ids)}
    if isinstance(lm, VisionLM):
        # vLLM expanded each image placeholder exactly as the learner does, and the
        # engine's distribution depends on the pixels
        expanded, _ = lm.expand(ids, images)
        inverted = [255 - im for im in images]
        report["image_tokens"] = len(expanded[0]) - len(ids[0]) + 1
        report["image_shape"] = list(images[0].shape)
        report["prompt_ids_match"] = expanded == engine_prompts
        report["engine_image_effect"] = max(
            abs(a - b) for a, b in zip(first_token(images), first_token(inverted), strict=True)
        )
    vision_before = {n: p.detach().clone() for n, p in lm.model.named_parameters() if "vision" in n}
    opt = torch.optim.SGD(lm.model.parameters(), lr=lr)
    target = [lm.action_ids("click_element(2)")] * len(ids)
    loss = -(
        lm.logprobs(ids, target, imgs) if isinstance(lm, VisionLM) else lm.logprobs(ids, target)
    )
    loss.mean().backward()
    opt.step()
    if vision_before:  # the step moved the vision tower too: the sync must carry it
        params = dict(lm.model.named_parameters())
        report["vision_params_moved"] = max(
            float((params[n].detach() - v).abs().max()) for n, v in vision_before.items()
        )
    sync_s = engine.load_weights(lm.model.state_dict(), 1)
    # the same answers under the new weights: the engine must have moved with the learner
    moved = score(answers)
    regen = first_token(imgs)
    first_changed = max(abs(regen[i] - engine_lps[i][0]) for i in range(len(ids)))
    after, _, _, _ = compare()
    report.update(
        {
            f"generate_median_s_{n}_prompts": timed_generate(n, repeats)
            for n in sorted({1, len(ids)})
        }
    )
    report.update(
        {
            "max_abs_diff_before_sync": before,
            "max_abs_diff_after_sync": after,
            "weight_sync_s": sync_s,
            "learner_logprob_change": float(moved[0, : len(answers[0])].sum()),
            "engine_changed_after_sync": first_changed,
            "engine_start_s": engine_start_s,
            "generate_s": generate_s,
            "max_tokens": max_tokens,
        }
    )
    return report


def run_policy(model: str, *, n: int = 4, max_model_len: int = 1024) -> dict[str, Any]:
    import time

    import torch

    from env_adapters.toy.gui import TASKS, ToyGuiEnv
    from trainer.llm.policy import LMPolicy, VisionContext

    learner = LMPolicy(model, role="learner", max_model_len=max_model_len)
    started = time.perf_counter()
    actor = LMPolicy(model, role="actor", max_model_len=max_model_len)
    engine_start_s = time.perf_counter() - started
    envs = [ToyGuiEnv(width=160, height=210) for _ in range(n)]
    obs = [e.reset(seed=i, options={"task": TASKS[i % len(TASKS)]})[0] for i, e in enumerate(envs)]

    def compare() -> tuple[float, list[Any]]:
        outs = actor.act(obs)
        with torch.no_grad():
            lps = learner.logprobs([o.context for o in outs], [o.choice for o in outs])
        return max(abs(float(a) - o.logprob) for a, o in zip(lps, outs, strict=True)), outs

    first, outs = compare()
    for i, (e, o) in enumerate(zip(envs, outs, strict=True)):
        nxt, _, term, trunc, info = e.step(o.action)
        if term or trunc:
            nxt, _ = e.reset(seed=100 + i, options={"task": TASKS[i % len(TASKS)]})
        obs[i] = {**nxt, "farm.history": ((o.action, info.get("action_error")),)}
    second, outs = compare()
    opt = torch.optim.SGD(learner.parameters(), lr=0.05)
    loss = -learner.logprobs([o.context for o in outs], [o.choice for o in outs]).mean()
    loss.backward()
    opt.step()
    actor.set_weights(learner.get_weights(), 1)
    learner.version = 1
    after, outs = compare()
    ctx = outs[0].context
    return {
        "model": model,
        "vision": actor.with_image,
        "context": type(ctx).__name__,
        "image_shape": list(ctx.image.shape) if isinstance(ctx, VisionContext) else None,
        "context_image_bytes": ctx.image.nbytes if isinstance(ctx, VisionContext) else 0,
        "max_abs_diff_before_sync": max(first, second),
        "max_abs_diff_after_sync": after,
        "versions_after_sync": sorted({o.version for o in outs}),
        "engine_start_s": engine_start_s,
        "generate_s": actor.engine.generate_s,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m trainer.llm.check", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("model")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tolerance", type=float, default=1e-3)
    ap.add_argument("--policy", action="store_true", help="check through LMPolicy's two copies")
    args = ap.parse_args(argv)
    report = run_policy(args.model) if args.policy else run(args.model)
    ok = (
        report["max_abs_diff_before_sync"] <= args.tolerance
        and report["max_abs_diff_after_sync"] <= args.tolerance
        and report.get("prompt_ids_match", True)
    )
    report["ok"] = ok
    print(json.dumps(report, indent=None if args.json else 2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
