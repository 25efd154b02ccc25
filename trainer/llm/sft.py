"""Supervised warm start of a language-model policy on recorded episodes.

``python -m trainer.llm.sft --collect 40 --tasks click-button,focus-text --store S``
first records scripted-oracle episodes of MiniWoB++ tasks (``miniwob/<task>``,
seeds ``0..N-1``) into the episode store ``S``; then every successful episode of
the store becomes examples (the prompt the policy would have seen at each step:
instruction, text view, earlier actions and their errors; the recorded action as
the answer), and the model is trained on them with cross-entropy on the answer
tokens only (``-log pi(action | prompt)``, the policy's own log-probability),
then saved (weights and tokenizer) to ``--out``.

For a vision-language model each example also carries the step's screenshot
(downscaled as the policy would attach it) and the model learns with it; the
processor is saved beside the weights.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.llm.prompt import PromptConfig, build_messages, prompt_image


@dataclass
class Example:
    messages: list[dict[str, Any]]
    action: str
    task: str
    image: Any = None  # HxWx3 uint8 when the prompt has an image part


def collect_oracle_episodes(store: str, tasks: Sequence[str], seeds: Sequence[int]) -> int:
    """Record oracle episodes of ``miniwob/<task>`` into ``store``; returns how many succeeded."""
    from env_adapters.browser import oracles
    from env_adapters.browser.miniwob import make_env
    from farm.recording.recorder import RecordingConfig, record

    ok = 0
    for task in tasks:
        env_id = f"miniwob/{task}"
        env = record(make_env(task), RecordingConfig(root=store, env_id=env_id, job="oracle"))
        try:
            for seed in seeds:
                reward, _, _ = oracles.SUITE.run_episode(env, env_id, seed)
                ok += reward > 0
        finally:
            env.close()
    return ok


def toy_examples(
    tasks: Sequence[str], seeds: Sequence[int], cfg: PromptConfig | None = None
) -> list[Example]:
    """Examples from ``toy/gui`` episodes played by its oracle (no browser, no store)."""
    from env_adapters.toy.gui import ToyGuiEnv, oracle_action

    cfg = cfg or PromptConfig()
    env = ToyGuiEnv(width=160, height=210)
    out: list[Example] = []
    for task in tasks:
        for seed in seeds:
            obs, _ = env.reset(seed=seed, options={"task": task})
            history: list[tuple[str, str | None]] = []
            for _ in range(10):
                action = oracle_action(obs)
                msgs = build_messages(obs, history, cfg)
                out.append(Example(msgs, action, task, prompt_image(obs, cfg)))
                obs, _, term, trunc, info = env.step(action)
                history.append((action, info.get("action_error")))
                if term or trunc:
                    break
    return out


def examples_from_store(
    store: str, tasks: Sequence[str] | None = None, cfg: PromptConfig | None = None
) -> list[Example]:
    """One example per step of every successful episode of ``store`` (of ``tasks``)."""
    from farm.recording.store import EpisodeStore

    cfg = cfg or PromptConfig()
    st = EpisodeStore(store)
    out: list[Example] = []
    try:
        for row in st.list():
            name = str(row.get("task") or row.get("env_id") or "").split("/")[-1]
            if tasks is not None and name not in tasks:
                continue
            if row.get("outcome") != "success":
                continue
            ep = st.open(row["episode_id"])
            history: list[tuple[str, str | None]] = []
            for i in range(1, len(ep.steps)):
                obs = ep.observation(i - 1)
                action = str(ep.action(i))
                msgs = build_messages(obs, history, cfg)
                out.append(Example(msgs, action, name, prompt_image(obs, cfg)))
                history.append((action, ep.steps[i].info.get("action_error")))
    finally:
        st.close()
    return out


def train(
    model_dir: str,
    examples: Sequence[Example],
    out: str,
    *,
    epochs: int = 3,
    lr: float = 1e-3,
    batch: int = 16,
    seed: int = 0,
    device: str = "cpu",
    log: Any = print,
) -> dict[str, Any]:
    """Cross-entropy on the answer tokens; saves the model and tokenizer to ``out``."""
    import torch

    from trainer.llm.lm import CausalLM, VisionLM, is_multimodal

    torch.manual_seed(seed)
    lm = (VisionLM if is_multimodal(model_dir) else CausalLM)(model_dir, device=device)
    prompts = [lm.prompt_ids(e.messages) for e in examples]
    images = [e.image for e in examples]
    answers = [lm.action_ids(e.action) for e in examples]
    opt = torch.optim.AdamW(lm.model.parameters(), lr=lr)
    order = list(range(len(examples)))
    rng = random.Random(seed)
    lm.model.train()
    losses: list[float] = []
    started = time.monotonic()
    for epoch in range(epochs):
        rng.shuffle(order)
        total = 0.0
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            batch_prompts = [prompts[j] for j in idx]
            batch_answers = [answers[j] for j in idx]
            if isinstance(lm, VisionLM):
                tok = lm.token_logprobs(batch_prompts, batch_answers, [images[j] for j in idx])
            else:
                tok = lm.token_logprobs(batch_prompts, batch_answers)
            n_tokens = sum(len(answers[j]) for j in idx)
            loss = -tok.sum() / n_tokens
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(lm.model.parameters(), 1.0)
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / max(1, len(order)))
        log(f"epoch {epoch + 1}/{epochs}: loss per answer token {losses[-1]:.4f}")
    lm.model.eval()
    Path(out).mkdir(parents=True, exist_ok=True)
    lm.model.save_pretrained(out, safe_serialization=True)
    (getattr(lm, "processor", None) or lm.tokenizer).save_pretrained(out)
    summary = {
        "examples": len(examples),
        "epochs": epochs,
        "losses": losses,
        "seconds": time.monotonic() - started,
        "from": model_dir,
    }
    (Path(out) / "farm_sft.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m trainer.llm.sft", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--model", required=True, help="the model directory to start from")
    ap.add_argument("--out", required=True, help="where to save the warm-started model")
    ap.add_argument("--store", required=True, help="the episode store (read; --collect writes)")
    ap.add_argument("--tasks", default="click-button,focus-text,click-tab")
    ap.add_argument(
        "--collect", type=int, default=0, help="record N oracle episodes per task first"
    )
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    if args.collect:
        ok = collect_oracle_episodes(args.store, tasks, range(args.collect))
        print(f"recorded {ok} successful oracle episodes into {args.store}")
    from trainer.llm.policy import prompt_config

    examples = examples_from_store(args.store, tasks, prompt_config(args.model))
    if not examples:
        print(f"no successful episodes of {tasks} in {args.store}", file=sys.stderr)
        return 2
    summary = train(args.model, examples, args.out, epochs=args.epochs, lr=args.lr)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
