"""A causal language model as a GUI policy (``policy.name: lm``).

The job makes two copies: the **actor** samples actions with vLLM
(:class:`~trainer.llm.engine.VLLMEngine`: per-token log-probabilities, the
version of the weights that sampled them) and the **learner** scores them with
transformers (:class:`~trainer.llm.lm.CausalLM`, differentiable, float32). A
step's context is the prompt's token ids, its choice the generated token ids
(the action's text, then end of sequence), its log-probability their sum; only
the action tokens enter the loss. ``set_weights`` on the actor is the weight
sync: the learner's state dict goes into the engine in place.

The prompt (:mod:`trainer.llm.prompt`) shows the instruction, the text view, the
episode's recent actions with their errors (the rollout passes them as
``obs["farm.history"]``) and the last action's error; the first line of the
answer is the action sent to the env, so a malformed answer becomes the env's
no-op step with the error, visible to the model next turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from env_adapters.gui.spaces import MAX_ACTION_TEXT, sanitize
from trainer.api.policy import ActOutput, Policy
from trainer.llm.prompt import PromptConfig, build_messages, parse_output


class LMPolicy(Policy):
    def __init__(
        self,
        model: str,
        *,
        role: str = "learner",
        max_tokens: int = 24,
        max_model_len: int = 2048,
        memory_fraction: float = 0.1,
        device: str = "cpu",
        prompt: Mapping[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        if role not in ("learner", "actor"):
            raise ValueError(f"role must be 'learner' or 'actor', got {role!r}")
        self.role = role
        self.model_path = model
        self.max_tokens = max_tokens
        self.prompt_cfg = PromptConfig(**dict(prompt or {}))
        self.version = 0
        from trainer.llm.lm import CausalLM

        # the learner holds the trainable model; the actor only needs its tokenizer
        self.lm = CausalLM(model, device=device) if role == "learner" else None
        if role == "actor":
            from transformers import AutoTokenizer

            from trainer.llm.engine import VLLMEngine

            self.tokenizer = AutoTokenizer.from_pretrained(model)
            self.engine: Any = VLLMEngine(
                model, max_model_len=max_model_len, seed=seed, memory_fraction=memory_fraction
            )
            import torch

            # vLLM's CPU attention plans for the thread count it was built with; the
            # thread that generates (the job's actor thread) must use the same
            self._threads = torch.get_num_threads()
        else:
            assert self.lm is not None
            self.tokenizer = self.lm.tokenizer
            self.engine = None
        self.eos = self.tokenizer.eos_token_id
        self.max_prompt = max_model_len - max_tokens

    # ------------------------------------------------------------------ acting

    def prompt_ids(self, obs: Mapping[str, Any]) -> list[int]:
        history = obs.get("farm.history") or ()
        ids = self.tokenizer.apply_chat_template(
            build_messages(obs, history, self.prompt_cfg), add_generation_prompt=True, tokenize=True
        )
        ids = list(ids["input_ids"] if isinstance(ids, Mapping) else ids)
        if len(ids) > self.max_prompt:  # keep the end: history and "Next action:"
            ids = ids[:1] + ids[-(self.max_prompt - 1) :]
        return ids

    def act(
        self,
        observations: Sequence[Mapping[str, Any]],
        *,
        greedy: bool = False,
        explore: Sequence[float] | None = None,
    ) -> list[ActOutput]:
        if self.engine is None:
            raise RuntimeError("the learner copy of an LM policy does not act")
        import torch

        if torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        prompts = [self.prompt_ids(o) for o in observations]
        gens = self.engine.generate(
            prompts, max_tokens=self.max_tokens, greedy=greedy, stop_token_ids=[self.eos]
        )
        outs = []
        for prompt, gen in zip(prompts, gens, strict=True):
            text = self.tokenizer.decode(
                [t for t in gen.token_ids if t != self.eos], skip_special_tokens=True
            )
            action, error = parse_output(sanitize(text, MAX_ACTION_TEXT))
            outs.append(
                ActOutput(
                    action=action or "noop()",
                    logprob=gen.logprob,
                    version=gen.version,
                    context=tuple(prompt),
                    choice=tuple(gen.token_ids),
                    error=error,
                )
            )
        return outs

    # ------------------------------------------------------------------ learning

    def logprobs(self, contexts: Sequence[Any], choices: Sequence[Any]) -> Any:
        if self.lm is None:
            raise RuntimeError("the actor copy of an LM policy does not score")
        return self.lm.logprobs([list(c) for c in contexts], [list(c) for c in choices])

    def parameters(self) -> Any:
        return self.lm.model.parameters() if self.lm is not None else iter(())

    def get_weights(self) -> dict[str, Any]:
        if self.lm is None:
            raise RuntimeError("the actor copy of an LM policy has no trainable weights")
        return {k: v.detach().clone() for k, v in self.lm.model.state_dict().items()}

    def set_weights(self, weights: Mapping[str, Any], version: int) -> None:
        if self.engine is not None:
            self.engine.load_weights(weights, version)
        else:
            assert self.lm is not None
            self.lm.model.load_state_dict(dict(weights))
        self.version = int(version)

    def train_mode(self, on: bool) -> None:
        if self.lm is not None:
            self.lm.model.train(on)
