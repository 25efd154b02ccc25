"""A tiny causal LM for tests and demos, built here: nothing is downloaded.

``python -m trainer.llm.tiny OUT_DIR`` trains a byte-level BPE tokenizer on text
the GUI envs produce (prompts over ``toy/gui`` observations and the action
grammar), then saves a randomly initialised Llama-architecture model (float32;
head dim 64, as vLLM's CPU attention needs >= 32) with that tokenizer and a chat
template in Hugging Face format, which both transformers and vLLM load from disk.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from trainer.llm.prompt import build_messages

SPECIAL = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus(n_episodes: int = 400, seed: int = 0) -> list[str]:
    """Prompts and actions from ``toy/gui`` episodes played by its oracle and at random."""
    from env_adapters.toy.gui import FEASIBLE_TASKS, TASKS, ToyGuiEnv, oracle_action

    rng = random.Random(seed)
    env = ToyGuiEnv(width=160, height=210)
    texts: list[str] = []
    for i in range(n_episodes):
        task = TASKS[i % len(TASKS)]
        obs, _ = env.reset(seed=rng.randrange(1 << 30), options={"task": task})
        history: list[tuple[str, str | None]] = []
        for _ in range(4):
            for m in build_messages(obs, history):
                texts.append(m["content"])
            if task in FEASIBLE_TASKS and rng.random() < 0.7:
                action = oracle_action(obs)
            else:
                refs = [
                    ln[1 : ln.index("]")] for ln in obs["text"].splitlines() if ln.startswith("[")
                ]
                action = rng.choice([f"click_element({rng.choice(refs)})", "fail()", "done()"])
            texts.append(action)
            obs, _, term, trunc, info = env.step(action)
            history.append((action, info.get("action_error")))
            if term or trunc:
                break
    return texts


def build(
    out: str | Path,
    *,
    vocab_size: int = 2048,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 2,
    seed: int = 0,
) -> Path:
    """Build the tokenizer and the model into ``out``; returns the directory."""
    try:
        import torch
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    except ImportError as e:
        from farm.errors import MissingExtraError

        raise MissingExtraError(getattr(e, "name", None) or "transformers", "train") from e
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(seed=seed), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        additional_special_tokens=SPECIAL[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden // heads,
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)
    (out / "farm_tiny.json").write_text(
        json.dumps({"seed": seed, "params": model.num_parameters()})
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m trainer.llm.tiny", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("out")
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    path = build(
        args.out, vocab_size=args.vocab_size, hidden=args.hidden, layers=args.layers, seed=args.seed
    )
    info: dict[str, Any] = json.loads((path / "farm_tiny.json").read_text())
    print(f"tiny model in {path}: {info['params']} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
