"""Dynamic batching: rollouts ``await actor.act(obs)``; the actor runs the policy on
every observation waiting at that moment (one forward pass for many episodes) in
its own thread, and swaps weights between batches (a weight sync never races a
forward pass)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from trainer.api.policy import ActOutput, Policy


@dataclass
class ActorStats:
    batches: int = 0
    requests: int = 0
    busy_s: float = 0.0
    syncs: int = 0
    sync_s: list[float] = field(default_factory=list)

    @property
    def mean_batch(self) -> float:
        return self.requests / self.batches if self.batches else 0.0


class BatchedActor:
    """The acting copy of the policy behind a dynamic batcher."""

    def __init__(self, policy: Policy, *, max_batch: int = 256, wait_s: float = 0.002) -> None:
        self.policy = policy
        self.max_batch = max_batch
        self.wait_s = wait_s
        self.stats = ActorStats()
        self._pending: list[tuple[Mapping[str, Any], bool, float, asyncio.Future[ActOutput]]] = []
        self._wake = asyncio.Event()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm-actor")
        self._task: asyncio.Task[None] | None = None

    @property
    def version(self) -> int:
        return self.policy.version

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="actor")

    async def act(
        self, obs: Mapping[str, Any], *, greedy: bool = False, explore: float = 0.0
    ) -> ActOutput:
        fut: asyncio.Future[ActOutput] = asyncio.get_running_loop().create_future()
        self._pending.append((obs, greedy, explore, fut))
        self._wake.set()
        return await fut

    async def set_weights(self, weights: Mapping[str, Any], version: int) -> float:
        """Load new weights between two batches; returns the seconds it took."""
        start = time.perf_counter()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self.policy.set_weights, weights, version)
        took = time.perf_counter() - start
        self.stats.syncs += 1
        self.stats.sync_s.append(took)
        return took

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.wait_s:
                await asyncio.sleep(
                    self.wait_s
                )  # let the other episodes that are about to ask join
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            if self._pending:
                self._wake.set()
            batch = [b for b in batch if not b[3].done()]
            for greedy in (False, True):
                part = [b for b in batch if b[1] is greedy]
                if not part:
                    continue
                start = time.perf_counter()
                try:
                    outs = await loop.run_in_executor(
                        self._thread,
                        lambda p=part, g=greedy: self.policy.act(
                            [x[0] for x in p], greedy=g, explore=[x[2] for x in p]
                        ),
                    )
                except Exception as e:  # noqa: BLE001 - every waiter gets the error
                    for *_, fut in part:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                self.stats.busy_s += time.perf_counter() - start
                self.stats.batches += 1
                self.stats.requests += len(part)
                for (*_, fut), out in zip(part, outs, strict=True):
                    if not fut.done():
                        fut.set_result(out)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for *_, fut in self._pending:
            if not fut.done():
                fut.cancel()
        self._thread.shutdown(wait=False)
