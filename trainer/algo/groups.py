"""Mini-group collection: ``G + r`` rollouts are launched for a group and the first
``G`` that finish cleanly are kept (the ``r`` extra cut stragglers). A rollout cut
by infrastructure (sandbox died, lease lost) is discarded and relaunched, at most
``max_relaunches`` times per group; a complete group whose rewards have zero
variance carries no signal and is dropped (the caller admits a replacement)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from trainer.api.types import Group, Trajectory


class Verdict(Enum):
    WAIT = "wait"  # kept; the group needs more
    RELAUNCH = "relaunch"  # infrastructure cut it: start another rollout
    COMPLETE = "complete"  # the group has G trajectories with reward variance
    ZERO_VARIANCE = "zero_variance"  # complete but useless: drop it
    FAILED = "failed"  # too many infrastructure failures: drop it
    SURPLUS = "surplus"  # the group was already decided: ignore


@dataclass
class GroupCollector:
    group: Group
    size: int  # G
    redundancy: int = 0  # r
    max_relaunches: int = 8
    relaunches: int = 0
    decided: bool = False
    discarded: list[Trajectory] = field(default_factory=list)

    @property
    def fresh_needed(self) -> int:
        """Fresh rollouts the group still needs (replayed members count)."""
        return self.size - len(self.group.trajectories)

    def launches(self) -> int:
        """How many rollouts to start now: the missing members plus the redundancy."""
        return self.fresh_needed + self.redundancy

    def add_replay(self, traj: Trajectory) -> None:
        self.group.trajectories.append(traj)

    def on_finished(self, traj: Trajectory) -> Verdict:
        if self.decided:
            return Verdict.SURPLUS
        if traj.infra_error is not None:
            self.discarded.append(traj)
            self.relaunches += 1
            if self.relaunches > self.max_relaunches:
                self.decided = True
                return Verdict.FAILED
            return Verdict.RELAUNCH
        self.group.trajectories.append(traj)
        if len(self.group.trajectories) < self.size:
            return Verdict.WAIT
        self.decided = True
        return Verdict.COMPLETE if self.group.has_variance() else Verdict.ZERO_VARIANCE
