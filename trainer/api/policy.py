"""The policy interface both sides use.

Rollouts call :meth:`Policy.act` on a batch of observations from whichever
episodes are waiting; the learner calls :meth:`Policy.logprobs` on step samples
(differentiable) and moves weights to the acting copy with
:meth:`Policy.get_weights` / :meth:`Policy.set_weights`. A small PyTorch policy
(:mod:`trainer.policies.text_pointer`) and language-model policies implement it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class ActOutput:
    """What acting on one observation gives."""

    action: str  # the action's text form
    logprob: float  # log pi(action | obs) under ``version``
    version: int
    context: Any  # what :meth:`Policy.logprobs` needs back
    choice: Any
    error: str | None = None  # the policy's output could not be turned into an action
    #: ``log pi(action | obs)`` of the policy itself; differs from ``logprob`` when the
    #: action was sampled from an exploration mixture (``explore > 0``)
    policy_logprob: float | None = None

    def __post_init__(self) -> None:
        if self.policy_logprob is None:
            self.policy_logprob = self.logprob


class Policy(ABC):
    """A GUI policy over the shared observation (instruction, text view, screenshot).

    ``version`` counts optimiser steps of the weights it holds; every sample
    carries the version that produced it.
    """

    version: int = 0

    @abstractmethod
    def act(
        self,
        observations: Sequence[Mapping[str, Any]],
        *,
        greedy: bool = False,
        explore: Sequence[float] | None = None,
    ) -> list[ActOutput]:
        """Actions for a batch of observations, with their log-probabilities.

        ``explore[i] = eps`` samples observation i's action from the mixture
        ``(1 - eps) * pi + eps * uniform`` over valid actions; ``logprob`` is then the
        mixture's (the behaviour policy) and ``policy_logprob`` pi's. Policies that do
        not explore ignore it."""

    @abstractmethod
    def logprobs(self, contexts: Sequence[Any], choices: Sequence[Any]) -> Any:
        """``log pi(choice | context)`` per sample as a differentiable 1-D tensor."""

    def entropy(self, contexts: Sequence[Any]) -> Any:
        """Per-sample entropy of the action distribution (optional; None: not available)."""
        return None

    @abstractmethod
    def parameters(self) -> Any:
        """The trainable parameters (for the optimiser)."""

    @abstractmethod
    def get_weights(self) -> dict[str, Any]:
        """A copy of the weights (what a weight sync sends)."""

    @abstractmethod
    def set_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Load ``weights`` and take ``version``."""

    def train_mode(self, on: bool) -> None:  # noqa: B027 - optional hook
        """Switch dropout and the like (no-op by default)."""
