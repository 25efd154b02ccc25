"""The learner side of a language-model policy: a transformers causal LM that scores
actions (sum of the log-probabilities of their tokens given the prompt), in float32
on the CPU or a GPU.

:class:`VisionLM` does the same for a vision-language model: a prompt's token ids
hold the image placeholder once, as the engine got them; the processor turns the
image into pixel values and the placeholder into the image's tokens (the same
expansion vLLM makes), and the model sees both, so the learner recomputes the
distribution the engine sampled from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from farm.errors import MissingExtraError


def _imports() -> tuple[Any, Any, Any]:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise MissingExtraError(getattr(e, "name", None) or "transformers", "train") from e
    return torch, AutoModelForCausalLM, AutoTokenizer


def chat_prompt_ids(
    messages: Sequence[Mapping[str, Any]], tokenizer: Any, processor: Any = None
) -> list[int]:
    """The chat's token ids with the generation prompt, by the processor's chat template
    when there is a processor (an image part becomes one placeholder token)."""
    if processor is not None:
        text = processor.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=False
        )
        return list(tokenizer(text, add_special_tokens=False).input_ids)
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


class CausalLM:
    """A causal LM and its tokenizer, loaded from a Hugging Face directory."""

    def __init__(self, path: str, *, device: str = "cpu") -> None:
        torch, auto_model, auto_tok = _imports()
        self.torch = torch
        self.path = path
        self.tokenizer = auto_tok.from_pretrained(path)
        self.model = auto_model.from_pretrained(path, dtype=torch.float32).to(device)
        self.model.eval()
        self.device = device
        self.eos = self.tokenizer.eos_token_id

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        return chat_prompt_ids(messages, self.tokenizer)

    def action_ids(self, action: str) -> list[int]:
        """The tokens of an answer: the action text, then end of sequence."""
        return [*self.tokenizer(action, add_special_tokens=False).input_ids, self.eos]

    def token_logprobs(
        self, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]]
    ) -> Any:
        """Per answer token ``log p(token | prompt, earlier tokens)``: a (N, L) tensor padded
        with zeros (differentiable)."""
        return self._token_logprobs(prompts, answers, {})

    def _token_logprobs(
        self,
        prompts: Sequence[Sequence[int]],
        answers: Sequence[Sequence[int]],
        extra: Mapping[str, Any],
    ) -> Any:
        torch = self.torch
        n = len(prompts)
        seqs = [list(p) + list(a) for p, a in zip(prompts, answers, strict=True)]
        width = max(len(s) for s in seqs)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        logits = self.model(input_ids=ids, attention_mask=mask, **extra).logits.float()
        logp = torch.log_softmax(logits[:, :-1], -1)
        target = ids[:, 1:]
        tok_lp = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (N, width - 1)
        longest = max(len(a) for a in answers)
        out = torch.zeros((n, longest), device=self.device)
        for i, (p, a) in enumerate(zip(prompts, answers, strict=True)):
            start = len(p) - 1  # logits at position t predict token t + 1
            out[i, : len(a)] = tok_lp[i, start : start + len(a)]
        return out

    def logprobs(self, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]]) -> Any:
        """``log pi(answer | prompt)`` per sample (sum over its tokens)."""
        return self.token_logprobs(prompts, answers).sum(-1)


def is_multimodal(path: str | Path) -> bool:
    """Whether the model directory holds a vision-language model (a vision tower in its
    config and a processor config beside it)."""
    p = Path(path)
    try:
        cfg = json.loads((p / "config.json").read_text())
    except (OSError, ValueError):
        return False
    has_processor = (p / "processor_config.json").exists() or (
        p / "preprocessor_config.json"
    ).exists()
    return isinstance(cfg, dict) and "vision_config" in cfg and has_processor


class VisionLM(CausalLM):
    """A vision-language model (``AutoModelForImageTextToText``) and its processor."""

    def __init__(self, path: str, *, device: str = "cpu") -> None:
        torch, _, _ = _imports()
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.torch = torch
        self.path = path
        self.processor = AutoProcessor.from_pretrained(path)
        self.tokenizer = self.processor.tokenizer
        self.model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).to(
            device
        )
        self.model.eval()
        self.device = device
        self.eos = self.tokenizer.eos_token_id
        self.image_token = str(self.processor.image_token)
        self.image_token_id = int(self.tokenizer.convert_tokens_to_ids(self.image_token))

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The prompt's token ids, an image part as one placeholder token."""
        return chat_prompt_ids(messages, self.tokenizer, self.processor)

    def expand(
        self, prompts: Sequence[Sequence[int]], images: Sequence[Any | None]
    ) -> tuple[list[list[int]], dict[str, Any]]:
        """The prompts with each image placeholder replaced by its image's tokens, and the
        model's image inputs (pixel values, ...) for the images that are not None."""
        from trainer.llm.engine import as_pil

        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images for {len(prompts)} prompts")
        out = [list(p) for p in prompts]
        which = [i for i, im in enumerate(images) if im is not None]
        for i, p in enumerate(out):
            if images[i] is None and self.image_token_id in p:
                raise ValueError(f"prompt {i} has an image placeholder but no image")
        if not which:
            return out, {}
        enc = self.processor(
            text=[self.image_token] * len(which),
            images=[[as_pil(images[i])] for i in which],
            add_special_tokens=False,
            padding=True,
            return_tensors="pt",
        )
        for row, i in enumerate(which):
            block = enc["input_ids"][row][enc["attention_mask"][row].bool()].tolist()
            p = out[i]
            if p.count(self.image_token_id) != 1:
                raise ValueError(
                    f"prompt {i} has an image but {p.count(self.image_token_id)} "
                    f"{self.image_token} placeholders (expected 1)"
                )
            at = p.index(self.image_token_id)
            out[i] = [*p[:at], *block, *p[at + 1 :]]
        skip = {"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"}
        extra = {k: v.to(self.device) for k, v in enc.items() if k not in skip}
        return out, extra

    def token_logprobs(
        self,
        prompts: Sequence[Sequence[int]],
        answers: Sequence[Sequence[int]],
        images: Sequence[Any | None] | None = None,
    ) -> Any:
        """As :meth:`CausalLM.token_logprobs`; ``images[i]`` is prompt i's image or None."""
        if images is None:
            return self._token_logprobs(prompts, answers, {})
        expanded, extra = self.expand(prompts, images)
        return self._token_logprobs(expanded, answers, extra)

    def logprobs(
        self,
        prompts: Sequence[Sequence[int]],
        answers: Sequence[Sequence[int]],
        images: Sequence[Any | None] | None = None,
    ) -> Any:
        return self.token_logprobs(prompts, answers, images).sum(-1)
