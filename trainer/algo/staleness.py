"""Staleness control by admission, with deadlines so that the bound holds for every
sample whatever order groups finish in.

Notation: ``B`` = groups per optimiser step, ``eta`` = the staleness bound, ``v`` =
the policy version rollouts act with (the learner publishes ``v + 1`` after its
step ``v``), ``n`` = the learner step that will take the next batch.

* A group admitted while rollouts act with version ``v`` gets the deadline
  ``d = v + eta``: it must be trained on at a step ``s <= d``. Its steps are acted
  by versions ``>= v``, so every sample's staleness ``s - version <= eta``.
* **Admission**: a group starts only if all live (running or finished, not yet
  trained) groups plus the new one can still meet their deadlines, one batch of
  ``B`` per step: with the live deadlines sorted, ``d_(0) <= d_(1) <= ...``, the
  i-th (0-based) must fit in steps ``n..d_(i)``, i.e. ``i < (d_(i) - n + 1) * B``.
  With the learner idle (``n = v``) and every live deadline ``<= v + eta`` this is
  the familiar bound ``accepted + running < (eta + v + 1) * B`` (accepted counts
  all groups kept since the start, ``v * B`` of them already trained), plus a cap
  on concurrency.
* **Batches**: a step takes the ``B`` finished groups with the earliest
  deadlines, and only if the groups left behind can still meet theirs (else it
  waits for a straggler: this is what bounds staleness when late groups finish
  first). ``eta = 0`` therefore trains synchronously: ``B`` groups per version,
  the learner waits for all of them, nothing starts while it trains.
* Dropped groups (zero reward variance, too many infrastructure failures) leave
  the accounting, which frees their slot for a replacement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from trainer.errors import StalenessError

T = TypeVar("T")


def feasible(deadlines: Iterable[int], next_step: int, batch: int) -> bool:
    """Whether groups with these deadlines can all be trained by their deadlines, ``batch``
    per step from ``next_step`` on: ``i < (d_(i) - next_step + 1) * batch`` for all i."""
    return all(i < (d - next_step + 1) * batch for i, d in enumerate(sorted(deadlines)))


@dataclass
class _Live(Generic[T]):
    admitted_version: int
    deadline: int
    item: T | None = None  # the finished group


@dataclass
class StalenessController(Generic[T]):
    """Admission and batch formation (see module doc). Single-threaded: call it from
    one event loop."""

    eta: int
    batch_groups: int
    max_running: int
    version: int = 0  # the version rollouts act with
    next_step: int = 0  # the learner step that takes the next batch
    _live: dict[int, _Live[T]] = field(default_factory=dict)
    admitted_total: int = 0
    dropped_total: int = 0
    consumed_total: int = 0

    def __post_init__(self) -> None:
        if self.eta < 0:
            raise ValueError(f"eta must be >= 0, got {self.eta}")
        if self.batch_groups < 1 or self.max_running < 1:
            raise ValueError("batch_groups and max_running must be >= 1")

    # ------------------------------------------------------------------ state

    @property
    def running(self) -> int:
        return sum(1 for g in self._live.values() if g.item is None)

    @property
    def ready(self) -> int:
        return sum(1 for g in self._live.values() if g.item is not None)

    def deadline_of(self, gid: int) -> int:
        return self._live[gid].deadline

    # ------------------------------------------------------------------ admission

    def can_admit(self) -> bool:
        if self.running >= self.max_running:
            return False
        deadlines = [g.deadline for g in self._live.values()]
        deadlines.append(self.version + self.eta)
        return feasible(deadlines, self.next_step, self.batch_groups)

    def admit(self, gid: int) -> int:
        """Start group ``gid``; returns the version it is admitted under."""
        if gid in self._live:
            raise ValueError(f"group {gid} is already live")
        if not self.can_admit():
            raise StalenessError("admitting now would break the staleness bound")
        self._live[gid] = _Live(self.version, self.version + self.eta)
        self.admitted_total += 1
        return self.version

    def finish(self, gid: int, item: T) -> None:
        """Group ``gid`` is complete and kept (it waits for a batch)."""
        self._live[gid].item = item

    def drop(self, gid: int) -> None:
        """Group ``gid`` is discarded (running or finished); its slot is free again."""
        del self._live[gid]
        self.dropped_total += 1

    # ------------------------------------------------------------------ batches

    def _pick(self) -> list[int] | None:
        ready = sorted((g.deadline, gid) for gid, g in self._live.items() if g.item is not None)
        if len(ready) < self.batch_groups:
            return None
        chosen = [gid for _, gid in ready[: self.batch_groups]]
        left = [g.deadline for gid, g in self._live.items() if gid not in chosen]
        if not feasible(left, self.next_step + 1, self.batch_groups):
            return None  # a straggler must be in this batch: wait for it
        return chosen

    def batch_ready(self) -> bool:
        return self._pick() is not None

    def take_batch(self) -> list[T]:
        """The next batch (earliest deadlines first); call only when :meth:`batch_ready`.
        Checks the bound: raises :class:`StalenessError` if a group is past its deadline."""
        chosen = self._pick()
        if chosen is None:
            raise StalenessError("no batch is ready")
        items: list[T] = []
        for gid in chosen:
            live = self._live.pop(gid)
            if self.next_step - live.admitted_version > self.eta:
                raise StalenessError(
                    f"group {gid} admitted at version {live.admitted_version} would be trained "
                    f"at step {self.next_step}, beyond eta={self.eta}"
                )
            assert live.item is not None
            items.append(live.item)
        self.next_step += 1
        self.consumed_total += len(items)
        return items

    def publish(self, version: int) -> None:
        """Rollouts now act with ``version`` (after the learner's step ``version - 1``)."""
        if version > self.next_step:
            raise StalenessError(f"version {version} published before step {version - 1} was taken")
        self.version = version

    # ------------------------------------------------------------------ checkpoints

    def state(self) -> dict[str, int]:
        return {
            "version": self.version,
            "next_step": self.next_step,
            "admitted_total": self.admitted_total,
            "dropped_total": self.dropped_total,
            "consumed_total": self.consumed_total,
        }

    def load_state(self, state: dict[str, int]) -> None:
        """Resume at a step boundary: groups that were in flight are gone (they were never
        accepted), so nothing live remains."""
        self._live.clear()
        self.version = int(state["version"])
        self.next_step = int(state["next_step"])
        self.admitted_total = int(state["admitted_total"])
        self.dropped_total = int(state["dropped_total"])
        self.consumed_total = int(state["consumed_total"])
