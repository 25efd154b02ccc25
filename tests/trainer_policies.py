"""Policies for trainer tests that misbehave on purpose (loaded by the job spec's
``policy.name: trainer_policies:<Class>``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainer.api.policy import ActOutput
from trainer.policies.text_pointer import TextPointerPolicy


class GarblingPolicy(TextPointerPolicy):
    """Every third action it emits is not an action at all."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.calls = 0

    def act(
        self,
        observations: Sequence[Mapping[str, Any]],
        *,
        greedy: bool = False,
        explore: Sequence[float] | None = None,
    ) -> list[ActOutput]:
        outs = super().act(observations, greedy=greedy, explore=explore)
        for out in outs:
            self.calls += 1
            if self.calls % 3 == 0:
                out.action = "clck(12, oops"
        return outs


class NaNPolicy(TextPointerPolicy):
    """Its log-probabilities turn NaN from policy version ``nan_from`` on."""

    def __init__(self, nan_from: int = 3, **kw: Any) -> None:
        super().__init__(**kw)
        self.nan_from = nan_from

    def logprobs(self, contexts: Sequence[Any], choices: Sequence[Any]) -> Any:
        lp = super().logprobs(contexts, choices)
        if self.version >= self.nan_from and lp.requires_grad:
            return lp * float("nan")
        return lp


class OffCharsetPolicy(TextPointerPolicy):
    """Every other action carries a character outside the GUI action space's charset."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.calls = 0

    def act(
        self,
        observations: Sequence[Mapping[str, Any]],
        *,
        greedy: bool = False,
        explore: Sequence[float] | None = None,
    ) -> list[ActOutput]:
        outs = super().act(observations, greedy=greedy, explore=explore)
        for out in outs:
            self.calls += 1
            if self.calls % 2 == 0:
                out.action += "\u2603"
        return outs
