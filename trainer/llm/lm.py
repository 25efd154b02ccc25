"""The learner side of a language-model policy: a transformers causal LM that scores
actions (sum of the log-probabilities of their tokens given the prompt), in float32
on the CPU or a GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from farm.errors import MissingExtraError


def _imports() -> tuple[Any, Any, Any]:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise MissingExtraError(getattr(e, "name", None) or "transformers", "train") from e
    return torch, AutoModelForCausalLM, AutoTokenizer


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

    def prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)

    def action_ids(self, action: str) -> list[int]:
        """The tokens of an answer: the action text, then end of sequence."""
        return [*self.tokenizer(action, add_special_tokens=False).input_ids, self.eos]

    def token_logprobs(
        self, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]]
    ) -> Any:
        """Per answer token ``log p(token | prompt, earlier tokens)``: a (N, L) tensor padded
        with zeros (differentiable)."""
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
        logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
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
