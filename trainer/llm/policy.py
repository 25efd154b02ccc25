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

A vision-language model directory (:func:`~trainer.llm.lm.is_multimodal`: a
vision tower in its config, a processor beside it) turns ``prompt.image`` on: the
current screenshot, downscaled to the processor's longest edge unless
``prompt.image_max_side`` says otherwise, goes with the prompt to vLLM, and the
step's context is a :class:`VisionContext` (the prompt's ids with one image
placeholder, and that downscaled screenshot as uint8) from which the learner
(:class:`~trainer.llm.lm.VisionLM`) recomputes the log-probability with the image.
A prompt too long for the model keeps its head through the image placeholder and
its end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from env_adapters.gui.spaces import MAX_ACTION_TEXT, sanitize
from trainer.api.policy import ActOutput, Policy
from trainer.llm.lm import CausalLM, VisionLM, chat_prompt_ids, is_multimodal
from trainer.llm.prompt import PromptConfig, build_messages, parse_output, prompt_image


@dataclass(frozen=True, eq=False)
class VisionContext:
    """A step's context for a vision-language model: what the engine was given."""

    ids: tuple[int, ...]  # the prompt, the image as one placeholder token
    image: np.ndarray | None  # HxWx3 uint8, already downscaled (None: no screenshot)


def prompt_config(
    model: str, settings: Mapping[str, Any] | None = None, processor: Any = None
) -> PromptConfig:
    """The prompt settings for ``model``: ``image`` on for a vision-language model unless
    ``settings`` turn it off, and ``image_max_side`` the processor's longest edge unless
    set (samples keep no more pixels than the model sees)."""
    out = dict(settings or {})
    if not is_multimodal(model):
        if out.get("image"):
            raise ValueError(f"prompt.image needs a vision-language model; {model} has none")
        return PromptConfig(**out)
    out.setdefault("image", True)
    if "image_max_side" not in out:
        if processor is None:
            from transformers import AutoProcessor

            processor = AutoProcessor.from_pretrained(model)
        size = getattr(processor.image_processor, "size", None)
        longest = (
            size.get("longest_edge")
            if isinstance(size, Mapping)
            else getattr(size, "longest_edge", None)  # transformers 5's SizeDict
        )
        if longest:
            out["image_max_side"] = int(longest)
    return PromptConfig(**out)


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
        self.multimodal = is_multimodal(model)
        self.version = 0
        # the learner holds the trainable model; the actor only needs its tokenizer (and
        # processor)
        self.processor: Any = None
        if role == "learner":
            self.lm: CausalLM | None = (VisionLM if self.multimodal else CausalLM)(
                model, device=device
            )
            self.processor = getattr(self.lm, "processor", None)
        elif self.multimodal:
            from transformers import AutoProcessor

            self.lm = None
            self.processor = AutoProcessor.from_pretrained(model)
        else:
            self.lm = None
        self.prompt_cfg = prompt_config(model, prompt, self.processor)
        self.with_image = self.multimodal and self.prompt_cfg.image
        if role == "actor":
            from transformers import AutoTokenizer

            from trainer.llm.engine import VLLMEngine

            self.tokenizer = (
                self.processor.tokenizer
                if self.processor is not None
                else AutoTokenizer.from_pretrained(model)
            )
            self.engine: Any = VLLMEngine(
                model,
                max_model_len=max_model_len,
                seed=seed,
                memory_fraction=memory_fraction,
                max_images=1 if self.multimodal else None,
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
        self.image_token_id: int | None = None
        self._image_tokens = 0  # what an image's placeholder grows to, less the placeholder
        if self.with_image:
            self.image_token_id = int(
                self.tokenizer.convert_tokens_to_ids(str(self.processor.image_token))
            )
            self._image_tokens = self._image_size_in_tokens() - 1

    def _image_size_in_tokens(self) -> int:
        side = self.prompt_cfg.image_max_side
        enc = self.processor(
            text=[str(self.processor.image_token)],
            images=[[np.zeros((side, side, 3), np.uint8)]],
            add_special_tokens=False,
        )
        return len(enc["input_ids"][0])

    # ------------------------------------------------------------------ acting

    def prompt(self, obs: Mapping[str, Any]) -> tuple[list[int], np.ndarray | None]:
        """The prompt's token ids and the image that goes with them (None: none)."""
        history = obs.get("farm.history") or ()
        msgs = build_messages(obs, history, self.prompt_cfg)
        ids = chat_prompt_ids(msgs, self.tokenizer, self.processor if self.with_image else None)
        image = prompt_image(obs, self.prompt_cfg) if self.with_image else None
        budget = self.max_prompt
        head = 1
        if image is not None and self.image_token_id in ids:
            budget -= self._image_tokens
            head = ids.index(self.image_token_id) + 1
        if len(ids) > budget:  # keep the end (history, "Next action:") and the head
            if budget - head < 16:  # the image does not leave room: the plain cut
                head = 1
            ids = ids[:head] + ids[-(budget - head) :]
            if image is not None and self.image_token_id not in ids:
                image = None
        return ids, image

    def prompt_ids(self, obs: Mapping[str, Any]) -> list[int]:
        return self.prompt(obs)[0]

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
        prompted = [self.prompt(o) for o in observations]
        prompts = [ids for ids, _ in prompted]
        images = [image for _, image in prompted]
        gens = self.engine.generate(
            prompts,
            max_tokens=self.max_tokens,
            greedy=greedy,
            stop_token_ids=[self.eos],
            images=images if self.with_image else None,
        )
        outs = []
        for prompt, image, gen in zip(prompts, images, gens, strict=True):
            text = self.tokenizer.decode(
                [t for t in gen.token_ids if t != self.eos], skip_special_tokens=True
            )
            action, error = parse_output(sanitize(text, MAX_ACTION_TEXT))
            outs.append(
                ActOutput(
                    action=action or "noop()",
                    logprob=gen.logprob,
                    version=gen.version,
                    context=VisionContext(tuple(prompt), image)
                    if self.with_image
                    else tuple(prompt),
                    choice=tuple(gen.token_ids),
                    error=error,
                )
            )
        return outs

    # ------------------------------------------------------------------ learning

    def logprobs(self, contexts: Sequence[Any], choices: Sequence[Any]) -> Any:
        if self.lm is None:
            raise RuntimeError("the actor copy of an LM policy does not score")
        answers = [list(c) for c in choices]
        if any(isinstance(c, VisionContext) for c in contexts):
            ids = [list(c.ids) if isinstance(c, VisionContext) else list(c) for c in contexts]
            images = [c.image if isinstance(c, VisionContext) else None for c in contexts]
            if not isinstance(self.lm, VisionLM):
                raise TypeError("image contexts need a vision-language model")
            return self.lm.logprobs(ids, answers, images)
        return self.lm.logprobs([list(c) for c in contexts], answers)

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
