"""Samples: steps, trajectories and groups, as rollouts produce them and the learner
consumes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Step:
    """One decision: the policy's input and choice, and what the env said.

    ``context`` and ``choice`` are whatever the policy needs to recompute the
    log-probability of this action (parsed elements and the picked indices for a
    small policy; prompt and action tokens for a language model).
    """

    context: Any
    choice: Any
    action: str  # the action's text form, as sent to the env
    logprob: float  # log pi_behave(action | context), recorded when acting
    version: int  # the policy version that acted
    reward: float = 0.0
    anchor: str = ""  # a hash of the observation (GiGPO anchor states)
    policy_logprob: float | None = None  # log pi(action) when acting explored (else = logprob)


@dataclass
class Trajectory:
    """One episode of one task (``seed`` is the task instance)."""

    task: str
    seed: int
    steps: list[Step] = field(default_factory=list)
    feasible: bool = True
    terminated: bool = False
    truncated: bool = False
    replay: bool = False  # a stored success replayed into a group (DTAC)
    infra_error: str | None = None  # cut by infrastructure: never trained on
    sandbox: str = ""
    started_s: float = 0.0
    ended_s: float = 0.0
    episode_id: str | None = None  # the recording's id
    reset_s: float = 0.0  # the env's reset, as the rollout saw it
    step_s: float = 0.0  # the env's steps, in all

    @property
    def ret(self) -> float:
        """The episode return ``sum_t r_t``."""
        return float(sum(s.reward for s in self.steps))

    @property
    def success(self) -> bool:
        return self.terminated and self.ret > 0

    @property
    def min_version(self) -> int:
        return min((s.version for s in self.steps), default=-1)

    def __len__(self) -> int:
        return len(self.steps)


@dataclass
class Group:
    """G trajectories of one task instance: the unit of admission, staleness
    accounting and batching."""

    gid: int
    task: str
    seed: int
    admitted_version: int
    stream: str = "learnable"  # curriculum stream: learnable | replay | infeasible | ...
    trajectories: list[Trajectory] = field(default_factory=list)
    completed_s: float = 0.0
    advantages: list[float] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [t.ret for t in self.trajectories]

    @property
    def num_steps(self) -> int:
        return sum(len(t) for t in self.trajectories)

    def has_variance(self, tol: float = 1e-8) -> bool:
        r = self.rewards
        return len(r) > 1 and max(r) - min(r) > tol

    def staleness(self, learner_version: int) -> int:
        """``learner_version - min(version of any fresh step)`` (replayed steps excluded)."""
        fresh = [t.min_version for t in self.trajectories if not t.replay and t.steps]
        return learner_version - min(fresh) if fresh else 0
