"""When a sandbox may do background work: in the agent's thinking time, if it is long enough.

A :class:`IdleGate` sees every call the sandbox serves (:meth:`IdleGate.busy`)
and learns two numbers, each an exponential moving average (weight
:data:`EMA_WEIGHT` for the newest sample):

* ``g``, the idle gap between the end of one call and the start of the next
  (the time the agent takes to choose its action);
* ``d[s]``, how long each background stage ``s`` takes ("context", "page",
  "load", "close").

A stage may start (:meth:`IdleGate.wait`) when no call runs, the sandbox has been
idle for at least ``min_idle_s``, and the gap predicted to remain covers it::

    g - idle_so_far >= d[s]

So a client that calls back to back (``g`` near 0) gets no background work
competing with its steps, and a policy that thinks longer than the stages has
them done in its thinking time. :meth:`IdleGate.hurry` lifts the gate for the
stages a call waits for itself (a reset that needs the prepared context), and
only for those: other background work (closing the last episode's context)
still waits for idle time rather than land on the call.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Iterator

EMA_WEIGHT = 0.3
#: stage durations assumed before one was measured (s): on the slow side
DEFAULT_STAGE_S = {"context": 0.1, "page": 0.3, "load": 0.3, "close": 0.05}
_POLL_S = 0.02


class IdleGate:
    """Tracks calls and idle gaps; lets background stages run in gaps that fit them."""

    def __init__(self, min_idle_s: float = 0.02) -> None:
        self.min_idle_s = min_idle_s
        self.gap_s = 0.0  # g: no background work before long gaps were seen
        self.stage_s: dict[str, float] = dict(DEFAULT_STAGE_S)
        self._busy = 0
        self._idle_since = time.monotonic()
        self._hurry: collections.Counter[str] = collections.Counter()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Mark a call in progress (nested calls count once)."""
        if self._busy == 0:
            gap = time.monotonic() - self._idle_since
            self.gap_s += EMA_WEIGHT * (gap - self.gap_s)
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1
            if self._busy == 0:
                self._idle_since = time.monotonic()

    @contextlib.contextmanager
    def hurry(self, *stages: str) -> Iterator[None]:
        """Let ``stages`` run at once while the block runs (a caller waits for them)."""
        self._hurry.update(stages)
        try:
            yield
        finally:
            self._hurry.subtract(stages)

    def may_start(self, stage: str) -> bool:
        """Whether ``stage`` may start now (see module doc)."""
        if self._hurry[stage] > 0:
            return True
        if self._busy:
            return False
        idle = time.monotonic() - self._idle_since
        return idle >= self.min_idle_s and self.gap_s - idle >= self.stage_s.get(stage, 0.0)

    async def wait(self, stage: str) -> None:
        """Return when ``stage`` may start."""
        while not self.may_start(stage):
            await asyncio.sleep(_POLL_S)

    def record(self, stage: str, seconds: float) -> None:
        """A run of ``stage`` took ``seconds`` (background or not)."""
        previous = self.stage_s.get(stage)
        self.stage_s[stage] = (
            seconds if previous is None else previous + EMA_WEIGHT * (seconds - previous)
        )

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Record how long the block (one run of ``stage``) takes."""
        start = time.monotonic()
        yield
        self.record(stage, time.monotonic() - start)
