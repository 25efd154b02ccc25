"""The learner: one optimiser step per batch of whole groups (run in its own thread).

Per step: advantages and weights (:mod:`trainer.algo.advantages`), the proximal
log-probabilities under the current weights (no gradient), the log-prob check
(:func:`trainer.algo.loss.check_logprobs`; replayed successes excluded: their
behaviour weight is set to 1, as their behaviour policy is long gone and the clip
around the proximal policy still bounds the update), then ``ppo_epochs`` passes of
``minibatches`` optimiser updates of the decoupled PPO loss (with ``grad_accum``,
the minibatches' gradients add up to one update per epoch). A non-finite loss or
gradient skips the update (the weights stay valid); too many in a row raise
:class:`TrainingDivergedError`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from trainer.algo.advantages import step_advantages
from trainer.algo.loss import LossConfig, check_logprobs, ppo_loss
from trainer.api.policy import Policy
from trainer.api.spec import AlgorithmSpec, OptimizerSpec
from trainer.api.types import Group
from trainer.errors import TrainingDivergedError
from trainer.util import require_torch


def make_optimizer(spec: OptimizerSpec, params: Any) -> Any:
    torch = require_torch()
    if spec.name == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, weight_decay=spec.weight_decay)
    cls = torch.optim.AdamW if spec.name == "adamw" else torch.optim.Adam
    return cls(params, lr=spec.lr, weight_decay=spec.weight_decay)


class Learner:
    def __init__(self, policy: Policy, optim: OptimizerSpec, algo: AlgorithmSpec) -> None:
        self.torch = require_torch()
        self.policy = policy
        self.algo = algo
        self.optim_spec = optim
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(optim, self.params)
        self.loss_cfg = LossConfig(algo.clip_low, algo.clip_high, algo.iw_cap, algo.entropy_coef)
        self.nonfinite_in_row = 0
        self.skipped = 0

    @property
    def version(self) -> int:
        return self.policy.version

    def train_step(self, groups: Sequence[Group]) -> dict[str, Any]:
        """Train on ``groups``; the policy's version becomes ``version + 1``."""
        torch = self.torch
        started = time.perf_counter()
        algo = self.algo
        advw = step_advantages(
            groups,
            algo.advantage,
            normalize_std=algo.normalize_std,
            omega=algo.gigpo_omega,
            gamma=algo.gamma,
        )
        steps = [s for g in groups for t in g.trajectories for s in t.steps]
        replayed = torch.tensor(
            [t.replay for g in groups for t in g.trajectories for _ in t.steps], dtype=torch.bool
        )
        contexts = [s.context for s in steps]
        choices = [s.choice for s in steps]
        behaviour = torch.tensor([s.logprob for s in steps], dtype=torch.float32)
        own = torch.tensor(
            [s.logprob if s.policy_logprob is None else s.policy_logprob for s in steps],
            dtype=torch.float32,
        )
        versions = torch.tensor([s.version for s in steps], dtype=torch.int64)
        adv = torch.tensor([a for a, _ in advw], dtype=torch.float32)
        weights = torch.tensor([w for _, w in advw], dtype=torch.float32)
        self.policy.train_mode(True)
        with torch.no_grad():
            proximal = self.policy.logprobs(contexts, choices).float()
        fresh = ~replayed
        stats: dict[str, Any] = check_logprobs(
            proximal[fresh], own[fresh], versions[fresh], self.version
        )
        # a replayed success was acted by a long-gone policy: its behaviour weight would
        # be ~0 exactly when the replay matters (the policy forgot it), so it gets weight 1
        behaviour = torch.where(replayed, proximal, behaviour)
        n = len(steps)
        order = torch.randperm(n)
        mbs = [order[i :: algo.minibatches] for i in range(algo.minibatches)]
        losses, last = [], {}
        for _ in range(algo.ppo_epochs):
            if algo.grad_accum:  # micro-batches add up to one update per epoch
                self._update(
                    mbs, contexts, choices, proximal, behaviour, adv, weights, losses, last
                )
            else:  # one update per minibatch
                for idx in mbs:
                    self._update(
                        [idx],
                        contexts,
                        choices,
                        proximal,
                        behaviour,
                        adv,
                        weights,
                        losses,
                        last,
                        len(mbs),
                    )
        self.policy.train_mode(False)
        self.policy.version += 1
        stats.update(last)
        stats.update(
            {
                "loss": sum(losses) / len(losses) if losses else float("nan"),
                "samples": n,
                "trajectories": sum(len(g.trajectories) for g in groups),
                "groups": len(groups),
                # must stay 0: such groups are dropped before they reach the learner
                "zero_variance_groups": sum(not g.has_variance() for g in groups),
                "advantage_abs_mean": float(adv.abs().mean()),
                "weighted_advantage_sum": float((adv * weights).sum()),
                "train_s": time.perf_counter() - started,
                "skipped_updates": self.skipped,
            }
        )
        return stats

    def _update(
        self,
        parts: list[Any],
        contexts: list[Any],
        choices: list[Any],
        proximal: Any,
        behaviour: Any,
        adv: Any,
        weights: Any,
        losses: list[float],
        last: dict[str, Any],
        scale: int = 1,
    ) -> None:
        """One optimiser step over ``parts`` (index tensors), their gradients accumulated.
        Weights sum to 1 over the batch; a lone minibatch of ``scale`` carries that share."""
        torch = self.torch
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for idx in parts:
            if len(idx) == 0:
                continue
            ctx = [contexts[i] for i in idx.tolist()]
            ch = [choices[i] for i in idx.tolist()]
            current = self.policy.logprobs(ctx, ch)
            ent = self.policy.entropy(ctx) if self.algo.entropy_coef else None
            loss, stats = ppo_loss(
                current,
                proximal[idx],
                behaviour[idx],
                adv[idx],
                weights[idx] * scale,
                self.loss_cfg,
                ent,
            )
            if not math.isfinite(stats["loss"]):
                self.optimizer.zero_grad(set_to_none=True)
                self._nonfinite("loss")
                return
            loss.backward()
            total += stats["loss"]
            last.update(stats)
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.optim_spec.max_grad_norm)
        if not math.isfinite(float(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self._nonfinite("gradient")
            return
        self.optimizer.step()
        self.nonfinite_in_row = 0
        losses.append(total)
        last["loss"] = total
        last["grad_norm"] = float(norm)

    def _nonfinite(self, what: str) -> None:
        self.skipped += 1
        self.nonfinite_in_row += 1
        if self.nonfinite_in_row >= self.algo.max_nonfinite:
            raise TrainingDivergedError(
                f"{self.nonfinite_in_row} non-finite {what}s in a row; the last checkpoint "
                "(written before them) is valid: resume from it with a lower learning rate"
            )

    # ------------------------------------------------------------------ checkpoints

    def state(self) -> dict[str, Any]:
        return {
            "weights": self.policy.get_weights(),
            "version": self.policy.version,
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state["weights"], int(state["version"]))
        self.optimizer.load_state_dict(state["optimizer"])

    def weights_finite(self) -> bool:
        torch = self.torch
        return all(bool(torch.isfinite(p).all()) for p in self.params)
