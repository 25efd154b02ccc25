"""EnvPool-style asynchronous stepping over many remote envs on many endpoints.

``send(actions, env_ids)`` starts those envs' steps and returns at once;
``recv(batch_size)`` returns the first ``batch_size`` envs whose step finished,
with their ids, so a policy never waits for the slowest env (a lockstep vector
env waits for ``max_i t_i`` every step; the pool's throughput approaches the
sum of the envs' own rates ``sum_i 1 / E[t_i]``).

Autoreset (``autoreset=``):

* ``"next_step"`` (default, as gymnasium's vector envs): after an env's
  episode ends, its next ``send`` resets it instead of stepping (the action
  is ignored) and ``recv`` returns the reset observation with reward 0 and
  ``terminated = truncated = False``;
* ``"same_step"``: the env is reset as soon as its episode ends; ``recv``
  returns the *new* episode's first observation, with the last observation
  and info of the finished episode in that env's ``info["final_obs"]`` /
  ``info["final_info"]`` (reward and flags are those of the final step).

``recv`` returns ``(obs, rewards, terminated, truncated, info)`` where ``obs``
is batched like gymnasium's vector envs and ``info = {"env_id": ids,
"infos": [per-env info dicts]}``. Envs are spread round-robin over endpoints.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from farm.client.env import AsyncRemoteEnv, aconnect
from farm.errors import ConfigError, FarmError

AUTORESET_MODES = ("next_step", "same_step")
PoolResult = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


class AsyncEnvPool:
    """The asyncio pool. Build it with :meth:`create`."""

    def __init__(self, envs: list[AsyncRemoteEnv], batch_size: int, autoreset: str) -> None:
        if autoreset not in AUTORESET_MODES:
            raise ConfigError(f"autoreset must be one of {AUTORESET_MODES}, got {autoreset!r}")
        if not 1 <= batch_size <= len(envs):
            raise ConfigError(f"batch_size must be in [1, num_envs={len(envs)}], got {batch_size}")
        self.envs = envs
        self.num_envs = len(envs)
        self.batch_size = batch_size
        self.autoreset = autoreset
        self.single_observation_space = envs[0].observation_space
        self.single_action_space = envs[0].action_space
        for i, env in enumerate(envs):
            if (
                env.observation_space != self.single_observation_space
                or env.action_space != self.single_action_space
            ):
                raise ConfigError(f"env {i} at {env.address} has different spaces from env 0")
        self._busy = np.zeros(self.num_envs, bool)
        self._needs_reset = np.zeros(self.num_envs, bool)
        self._done: deque[tuple[int, Any]] = deque()
        self._ready = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def create(
        cls,
        addresses: Sequence[str],
        num_envs: int,
        batch_size: int | None = None,
        *,
        autoreset: str = "next_step",
        **connect_kwargs: Any,
    ) -> AsyncEnvPool:
        """Open ``num_envs`` sessions spread round-robin over ``addresses``."""
        if not addresses:
            raise ConfigError("an env pool needs at least one address")
        if num_envs < 1:
            raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
        results = await asyncio.gather(
            *(aconnect(addresses[i % len(addresses)], **connect_kwargs) for i in range(num_envs)),
            return_exceptions=True,
        )
        envs = [r for r in results if isinstance(r, AsyncRemoteEnv)]
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(e.close() for e in envs), return_exceptions=True)
            raise errors[0]
        try:
            return cls(envs, batch_size or num_envs, autoreset)
        except BaseException:  # e.g. a bad batch_size: close the sessions just opened
            await asyncio.gather(*(e.close() for e in envs), return_exceptions=True)
            raise

    # ------------------------------------------------------------ batching

    def _batch(self, items: list[tuple[int, Any]]) -> PoolResult:
        n = len(items)
        obs = concatenate(
            self.single_observation_space,
            [r[0] for _, r in items],
            create_empty_array(self.single_observation_space, n),
        )
        rewards = np.array([r[1] for _, r in items], dtype=np.float64)
        terminated = np.array([r[2] for _, r in items], dtype=bool)
        truncated = np.array([r[3] for _, r in items], dtype=bool)
        info = {
            "env_id": np.array([i for i, _ in items], dtype=np.int64),
            "infos": [r[4] for _, r in items],
        }
        return obs, rewards, terminated, truncated, info

    @property
    def observation_space(self) -> Any:
        """The batched observation space of a full batch."""
        return batch_space(self.single_observation_space, self.batch_size)

    # ------------------------------------------------------------ reset / send / recv

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env (env ``i`` with ``seed + i``) and return all observations."""
        if self._busy.any():
            raise FarmError("reset() while envs are stepping; recv() their results first")
        results = await asyncio.gather(
            *(
                env.reset(seed=None if seed is None else seed + i, options=options)
                for i, env in enumerate(self.envs)
            )
        )
        self._needs_reset[:] = False
        obs = concatenate(
            self.single_observation_space,
            [r[0] for r in results],
            create_empty_array(self.single_observation_space, self.num_envs),
        )
        return obs, {"env_id": np.arange(self.num_envs), "infos": [r[1] for r in results]}

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Start a step of each env in ``env_ids`` (default: all); returns at once."""
        self._start(self._claim(actions, env_ids), actions)

    def _claim(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None) -> list[int]:
        """Validate a send and mark its envs busy (any thread; the pool has one user)."""
        ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        if ids.ndim != 1 or len(ids) != len(actions):
            raise ConfigError(f"got {len(actions)} actions for {ids.size} env ids")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_envs):
            raise ConfigError(f"env ids must be in [0, {self.num_envs}), got {ids.tolist()}")
        if len(set(ids.tolist())) != len(ids) or self._busy[ids].any():
            raise FarmError(
                f"env(s) {ids[self._busy[ids]].tolist()} are still stepping (or repeated)"
            )
        self._busy[ids] = True
        return ids.tolist()

    def _start(self, ids: list[int], actions: Any) -> None:
        """Start the claimed envs' steps (on the pool's event loop)."""
        loop = asyncio.get_running_loop()
        for i, action in zip(ids, actions, strict=True):
            task = loop.create_task(self._run(i, action))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, i: int, action: Any) -> None:
        env = self.envs[i]
        try:
            if self._needs_reset[i]:
                obs, info = await env.reset()
                result: Any = (obs, 0.0, False, False, info)
                self._needs_reset[i] = False
            else:
                obs, reward, terminated, truncated, info = await env.step(action)
                if terminated or truncated:
                    if self.autoreset == "same_step":
                        new_obs, new_info = await env.reset()
                        info = {**new_info, "final_obs": obs, "final_info": info}
                        obs = new_obs
                    else:
                        self._needs_reset[i] = True
                result = (obs, reward, terminated, truncated, info)
        except Exception as e:  # noqa: BLE001 - delivered to recv()
            result = e
        self._done.append((i, result))
        self._ready.set()

    async def recv(self, batch_size: int | None = None) -> PoolResult:
        """The first ``batch_size`` finished envs (default: the pool's batch size).

        Raises the error of a failed step (e.g. an invalid action), naming the env.
        """
        n = batch_size or self.batch_size
        if n > self.num_envs:
            raise ConfigError(f"batch_size {n} > num_envs {self.num_envs}")
        pending = int(self._busy.sum())  # stepping, or finished and not yet received
        if n > pending:
            raise FarmError(f"recv({n}) but only {pending} env(s) were sent; send() first")
        while len(self._done) < n:
            self._ready.clear()
            await self._ready.wait()
        items = [self._done.popleft() for _ in range(n)]
        for index, (i, result) in enumerate(items):
            if isinstance(result, BaseException):
                # hand the error to the caller; keep the other results for the next recv()
                self._busy[i] = False
                self._done.extendleft(reversed(items[:index] + items[index + 1 :]))
                result.add_note(f"(raised by env {i} of the pool)")
                raise result
        for i, _ in items:
            self._busy[i] = False
        return self._batch(items)

    async def step(
        self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None
    ) -> PoolResult:
        """``send`` then ``recv`` of as many envs as were sent."""
        self.send(actions, env_ids)
        return await self.recv(len(actions))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(env.close() for env in self.envs), return_exceptions=True)


class EnvPool:
    """The synchronous pool: an :class:`AsyncEnvPool` on a background event loop.

    >>> pool = EnvPool(["unix:///tmp/a.sock", "unix:///tmp/b.sock"], num_envs=16, batch_size=4)
    >>> obs, info = pool.reset(seed=0)
    >>> pool.send(actions, info["env_id"])
    >>> obs, rew, term, trunc, info = pool.recv()     # the 4 envs that finished first
    """

    def __init__(
        self, addresses: Sequence[str], num_envs: int, batch_size: int | None = None, **kwargs: Any
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="farm-pool"
        )
        self._thread.start()
        try:
            self._pool: AsyncEnvPool = self._call(
                AsyncEnvPool.create(addresses, num_envs, batch_size, **kwargs)
            )
        except BaseException:
            self._stop_loop()
            raise
        self.num_envs = self._pool.num_envs
        self.batch_size = self._pool.batch_size
        self.single_observation_space = self._pool.single_observation_space
        self.single_action_space = self._pool.single_action_space

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return self._call(self._pool.reset(seed=seed, options=options))

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Validated here, started on the pool's loop; returns without waiting for it."""
        ids = self._pool._claim(actions, env_ids)
        self._loop.call_soon_threadsafe(self._pool._start, ids, list(actions))

    def recv(self, batch_size: int | None = None) -> PoolResult:
        return self._call(self._pool.recv(batch_size))

    def step(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> PoolResult:
        return self._call(self._pool.step(actions, env_ids))

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._call(self._pool.close())
        finally:
            self._stop_loop()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
