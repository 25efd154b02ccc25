"""What farm serves: gymnasium envs, sync or async, and how a session runs one.

farm serves any :class:`gymnasium.Env`. Sandbox adapters whose work is I/O
(a browser, an emulator) implement the *async* form instead: the same spaces
plus ``areset``/``astep``/``aclose`` coroutines, which the server awaits on its
event loop, so one process serves many slow sandboxes concurrently.

A plain (sync) env runs according to its executor:

* ``"thread"`` (default): every call of a session runs on that session's own
  worker thread, so a slow ``step`` never stalls other sessions and
  thread-affine envs always see the same thread;
* ``"inline"``: calls run directly on the server's event loop. Only for envs
  whose steps take microseconds (toy envs, CartPole): it saves the thread hop.

An env states its preference with ``metadata["farm.executor"]``; the server's
``--executor`` flag sets the default for envs that state none.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, Protocol, SupportsFloat, runtime_checkable

from gymnasium import spaces

Executor = Literal["thread", "inline"]

#: ``info`` key naming why an episode was cut short by infrastructure (a sandbox that
#: went away, crashed or hung), as opposed to the task's own time limit
TRUNCATED_REASON = "farm.truncated_reason"
ResetResult = tuple[Any, dict[str, Any]]
StepResult = tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]
EnvFactory = Callable[[], Any]


@runtime_checkable
class AsyncEnv(Protocol):
    """The async form of a gymnasium env, for sandboxes whose steps are I/O."""

    observation_space: spaces.Space
    action_space: spaces.Space
    metadata: dict[str, Any]

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult: ...

    async def astep(self, action: Any) -> StepResult: ...

    async def aclose(self) -> None: ...


def is_async_env(env: Any) -> bool:
    """True when ``env`` offers the async form (it is then awaited, never threaded)."""
    return callable(getattr(env, "areset", None)) and callable(getattr(env, "astep", None))


class EnvRunner:
    """Runs one environment instance for one session.

    Build it with :meth:`create`, which constructs the env off the event loop.
    """

    def __init__(self, env: Any, mode: str, worker: ThreadPoolExecutor | None) -> None:
        self.env = env
        self.mode = mode  # "async", "thread" or "inline"
        self._worker = worker

    @classmethod
    async def create(cls, factory: EnvFactory, default_executor: Executor) -> EnvRunner:
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm-env")
        loop = asyncio.get_running_loop()
        try:
            env = await loop.run_in_executor(worker, factory)
        except BaseException:
            worker.shutdown(wait=False)
            raise
        if is_async_env(env):
            mode = "async"
        else:
            metadata = getattr(env, "metadata", None) or {}
            mode = metadata.get("farm.executor", default_executor)
            if mode not in ("thread", "inline"):
                mode = default_executor
        if mode != "thread":
            worker.shutdown(wait=False)
            worker = None
        return cls(env, mode, worker)

    @property
    def observation_space(self) -> spaces.Space:
        return self.env.observation_space

    @property
    def action_space(self) -> spaces.Space:
        return self.env.action_space

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._worker is None:
            return fn(*args, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, lambda: fn(*args, **kwargs))

    async def reset(self, seed: int | None, options: dict[str, Any] | None) -> ResetResult:
        if self.mode == "async":
            return await self.env.areset(seed=seed, options=options)
        return await self._call(self.env.reset, seed=seed, options=options)

    async def step(self, action: Any) -> StepResult:
        if self.mode == "async":
            return await self.env.astep(action)
        return await self._call(self.env.step, action)

    async def close(self) -> None:
        """Close the env; never raises (a session's end must always complete)."""
        try:
            with contextlib.suppress(Exception):
                if self.mode == "async":
                    await self.env.aclose()
                else:
                    await self._call(self.env.close)
        finally:
            if self._worker is not None:
                self._worker.shutdown(wait=False)
