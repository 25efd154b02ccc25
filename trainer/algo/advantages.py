"""Advantages and sample weights for step samples of a group of trajectories.

Every method returns, per trajectory ``i`` and step ``t``, an advantage ``A_it``
and a weight ``w_it``; the loss is ``-sum_it w_it * surrogate_it(A_it)`` over the
batch, so the weights also carry the normalisation.

* ``stepo`` (default): ``A_it = A_i = (R_i - mean_j R_j) / (std_j R_j + eps)`` (the
  group-normalised return) and ``w_it = 1 / (T_i * N)``, with ``T_i`` the length of
  trajectory ``i`` and ``N`` the number of trajectories in the batch. Each
  trajectory weighs ``1/N`` whatever its length, so within a group
  ``sum_i sum_t w_it * A_it = (1/N) sum_i A_i = 0``: a long failure cannot swamp
  a short success.
* ``grpo``: the same ``A_i`` on every step, ``w_it = 1 / S`` with ``S`` the number
  of steps in the batch (the naive decomposition: long trajectories weigh more).
* ``gigpo``: ``A_it = A_i + omega * A^step_it``, ``w_it`` as in stepo. Steps of a
  group's trajectories that start from the same observation (``Step.anchor``)
  form an anchor group; ``A^step_it = (G_it - mean) / (std + eps)`` over it, with
  the discounted return ``G_it = sum_{k >= t} gamma^(k - t) r_ik``; 0 for anchors
  seen once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

import numpy as np

from trainer.api.types import Group

Method = Literal["stepo", "grpo", "gigpo"]
EPS = 1e-6


def group_advantages(returns: Sequence[float], *, normalize_std: bool = True) -> list[float]:
    """``A_i = (R_i - mean R) / (std R + eps)`` (``std`` off: ``R_i - mean R``)."""
    r = np.asarray(returns, dtype=np.float64)
    a = r - r.mean()
    if normalize_std:
        a = a / (r.std() + EPS)
    return a.tolist()


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    out, acc = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return out


def step_advantages(
    groups: Sequence[Group],
    method: Method = "stepo",
    *,
    normalize_std: bool = True,
    omega: float = 1.0,
    gamma: float = 0.95,
) -> list[tuple[float, float]]:
    """``(A_it, w_it)`` for every step of every trajectory, in order (groups, then
    trajectories, then steps)."""
    n_traj = sum(len(g.trajectories) for g in groups)
    n_steps = sum(g.num_steps for g in groups)
    out: list[tuple[float, float]] = []
    for g in groups:
        adv = group_advantages(g.rewards, normalize_std=normalize_std)
        g.advantages = adv
        extra: dict[tuple[int, int], float] = {}
        if method == "gigpo":
            extra = _anchor_advantages(g, gamma, normalize_std)
        for i, traj in enumerate(g.trajectories):
            for t in range(len(traj.steps)):
                if method == "grpo":
                    out.append((adv[i], 1.0 / n_steps))
                else:
                    a = adv[i] + omega * extra.get((i, t), 0.0)
                    out.append((a, 1.0 / (len(traj.steps) * n_traj)))
    return out


def _anchor_advantages(g: Group, gamma: float, normalize_std: bool) -> dict[tuple[int, int], float]:
    by_anchor: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
    for i, traj in enumerate(g.trajectories):
        returns = discounted_returns([s.reward for s in traj.steps], gamma)
        for t, step in enumerate(traj.steps):
            if step.anchor:
                by_anchor[step.anchor].append((i, t, returns[t]))
    out: dict[tuple[int, int], float] = {}
    for members in by_anchor.values():
        if len(members) < 2:
            continue
        advs = group_advantages([m[2] for m in members], normalize_std=normalize_std)
        for (i, t, _), a in zip(members, advs, strict=True):
            out[(i, t)] = a
    return out
