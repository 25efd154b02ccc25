"""The decoupled PPO-style loss.

Per step sample: behaviour log-probability ``b`` (recorded when acting, by a
possibly older version), proximal ``p`` (the learner's weights at the start of
this optimiser step, no gradient) and current ``c`` (with gradient)::

    r   = exp(c - p)                         # trust-region ratio, clipped around pi_prox
    iw  = min(exp(p - b), iw_cap)            # truncated behaviour importance weight
    L   = -sum_i w_i * iw_i * min(r_i A_i, clip(r_i, 1 - eps_low, 1 + eps_high) A_i)
          - entropy_coef * sum_i w_i * H_i

``w_i`` are the sample weights from :mod:`trainer.algo.advantages`.
:func:`check_logprobs` fails loudly when ``b`` and ``p`` are silently identical for
stale samples (the acting copy never received new weights: clipping would be a
no-op) or differ for fresh ones (acting and learning compute differently).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.errors import LogprobMismatchError


@dataclass(frozen=True)
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.28
    iw_cap: float = 5.0
    entropy_coef: float = 0.0


def ppo_loss(
    current: Any,
    proximal: Any,
    behaviour: Any,
    advantages: Any,
    weights: Any,
    cfg: LossConfig,
    entropy: Any = None,
) -> tuple[Any, dict[str, float]]:
    """The loss (a scalar tensor) and its statistics; all inputs are 1-D tensors."""
    import torch

    ratio = torch.exp(current - proximal)
    iw = torch.exp(proximal - behaviour).clamp(max=cfg.iw_cap)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    loss = -(weights * iw * surrogate).sum()
    if entropy is not None and cfg.entropy_coef:
        loss = loss - cfg.entropy_coef * (weights * entropy).sum()
    with torch.no_grad():
        clip_frac = ((unclipped - clipped).abs() > 1e-12).float().mean().item()
        truncated = (torch.exp(proximal - behaviour) > cfg.iw_cap).float().mean().item()
        stats = {
            "loss": float(loss.detach().item()),
            "clip_fraction": clip_frac,
            "iw_mean": float(iw.mean().item()),
            "iw_truncated_fraction": truncated,
            "approx_kl_behaviour": float((behaviour - proximal).mean().item()),
        }
        if entropy is not None:
            stats["entropy"] = float(entropy.mean().item())
    return loss, stats


def check_logprobs(
    proximal: Any,
    behaviour: Any,
    versions: Any,
    learner_version: int,
    *,
    fresh_tol: float = 1e-3,
    stale_min: float = 1e-7,
) -> dict[str, float]:
    """Raise :class:`LogprobMismatchError` when behaviour and proximal log-probs disagree
    with what the samples' versions imply (see module doc). Returns their gaps."""
    import torch

    gap = (proximal - behaviour).abs()
    stale = versions < learner_version
    fresh = ~stale
    stats: dict[str, float] = {}
    if bool(fresh.any()):
        worst = float(gap[fresh].max().item())
        stats["logprob_gap_fresh_max"] = worst
        if worst > fresh_tol:
            raise LogprobMismatchError(
                f"fresh samples (version {learner_version}) have behaviour log-probs up to "
                f"{worst:.3g} away from the learner's recomputation (tolerance {fresh_tol:g}): "
                "the acting policy and the learner do not compute the same distribution"
            )
    if bool(stale.any()):
        stats["logprob_gap_stale_max"] = float(gap[stale].max().item())
        # samples the policy was not already certain of must have moved when the
        # weights changed; exactly equal log-probs there mean no weights arrived
        uncertain = stale & (behaviour < -1e-3)
        if int(uncertain.sum().item()) >= 4 and float(gap[uncertain].max().item()) < stale_min:
            raise LogprobMismatchError(
                f"{int(uncertain.sum())} samples from versions < {learner_version} have "
                "behaviour log-probs identical to the learner's: the acting copy is not "
                "receiving new weights (clipping and importance weights would be silently "
                "disabled)"
            )
    del torch
    return stats
