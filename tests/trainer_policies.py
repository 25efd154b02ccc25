"""Policies for trainer tests that misbehave on purpose (loaded by the job spec's
``policy.name: trainer_policies:<Class>``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainer.api.policy import ActOutput
from trainer.policies.text_pointer import TextPointerPolicy


class _Tampering(TextPointerPolicy):
    """Acts as the text-pointer policy, then rewrites the n-th action with :meth:`tamper`."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.calls = 0

    def tamper(self, action: str, n: int) -> str:
        return action

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
            out.action = self.tamper(out.action, self.calls)
        return outs


class GarblingPolicy(_Tampering):
    """Every third action it emits is not an action at all."""

    def tamper(self, action: str, n: int) -> str:
        return "clck(12, oops" if n % 3 == 0 else action


class OffCharsetPolicy(_Tampering):
    """Every other action carries a character outside the GUI action space's charset."""

    def tamper(self, action: str, n: int) -> str:
        return action + "\u2603" if n % 2 == 0 else action


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
