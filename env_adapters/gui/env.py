"""``GuiEnv``: the episode logic every GUI sandbox shares; adapters fill in the I/O.

Per step (``astep``):

1. the action is decoded (text form or structured); a malformed action is a
   **no-op step** whose ``info["action_error"]`` (and the observation's
   metadata) names the problem, never an exception;
2. ``done()`` ends the episode and the task is evaluated; ``fail()`` ends it
   with reward 1 if the task is infeasible, else 0;
3. any other action is performed by the adapter (an adapter ``ActionError``,
   e.g. an unknown element ref, is again a no-op with the error in ``info``),
   then the adapter evaluates the task (reward, done) and observes the sandbox
   (concurrently if the adapter sets ``observe_while_evaluating``);
4. for infeasible tasks any ending other than ``fail()`` earns 0;
5. after ``max_steps`` steps the episode is truncated.

If the sandbox dies or hangs (an adapter call raises :class:`SandboxCrashed`
or exceeds ``op_timeout_s``), the step returns ``truncated=True`` with
``info["farm.truncated_reason"]`` and the next reset relaunches the sandbox.

Adapters implement the async hooks ``_launch``, ``_start_episode``,
``_perform``, ``_observe``, ``_evaluate`` and ``_shutdown``. ``reset``/``step``
are sync facades (a private event loop in its own thread) for in-process use; the farm server
awaits ``areset``/``astep`` directly.

:class:`CheckedGuiEnv` is the base of the adapters over a real sandbox whose
task a checker scores at ``done()`` (desktop, Android).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np

from env_adapters.gui import actions as A
from env_adapters.gui import spaces as S
from env_adapters.gui.tasks import CheckerError, TaskLogic, TaskSpec
from farm.env import TRUNCATED_REASON
from farm.errors import FarmError

__all__ = ["TRUNCATED_REASON", "CheckedGuiEnv", "GuiEnv", "SandboxCrashed", "both"]


class SandboxCrashed(FarmError):
    """The sandbox process died or stopped answering; the episode cannot go on."""


class GuiEnv(gym.Env):
    """Base class of GUI sandboxes (see module doc)."""

    metadata: dict[str, Any] = {"render_modes": []}
    #: bound of ``_launch`` (starting a browser or an emulator takes longer than one op)
    launch_timeout_s: float = 60.0
    #: run ``_evaluate`` and ``_observe`` of a step concurrently (adapters whose
    #: evaluation cannot change what is observed, and whose sandbox overlaps the two)
    observe_while_evaluating: bool = False

    def __init__(
        self,
        task: TaskSpec,
        *,
        width: int,
        height: int,
        action_format: str = "text",
        op_timeout_s: float = 20.0,
    ) -> None:
        if action_format not in ("text", "structured"):
            raise ValueError(f"action_format must be 'text' or 'structured', got {action_format!r}")
        self.task = task
        self.width, self.height = width, height
        self.action_format = action_format
        self.op_timeout_s = op_timeout_s
        self.observation_space = S.observation_space(width, height)
        self.action_space = (
            S.text_action_space() if action_format == "text" else S.structured_action_space()
        )
        self.metadata = {**type(self).metadata, "farm.task": task.id, "farm.kind": task.kind}
        self._launched = False
        self._crashed: str | None = None
        self._instruction = ""
        self._steps = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self.timings: dict[str, float] = {}

    # ------------------------------------------------------------ adapter hooks

    async def _launch(self) -> None:
        """Start the sandbox (browser, X display, emulator)."""
        raise NotImplementedError

    async def _start_episode(self, seed: int | None, options: dict[str, Any]) -> str:
        """Set up a fresh episode of ``self.task``; return its instruction."""
        raise NotImplementedError

    async def _perform(self, action: A.Action) -> None:
        """Perform a non-terminal action; raise ActionError if it cannot be done."""
        raise NotImplementedError

    async def _observe(self) -> tuple[np.ndarray, str, dict[str, Any]]:
        """Screenshot (HxWx3 uint8), text view, and sandbox metadata."""
        raise NotImplementedError

    async def _evaluate(self) -> tuple[float, bool, dict[str, Any]]:
        """Reward so far, whether the task ended on its own, and evaluator info."""
        raise NotImplementedError

    async def _evaluate_done(self) -> float:
        """Reward when the agent declares ``done()`` (default: the current evaluation)."""
        reward, _, _ = await self._evaluate()
        return reward

    async def _shutdown(self) -> None:
        """Stop the sandbox; must not raise."""

    # ------------------------------------------------------------ helpers

    async def _call(self, what: str, coro: Any, timeout_s: float | None = None) -> Any:
        """Run an adapter call under the op timeout; failures become SandboxCrashed."""
        timeout_s = self.op_timeout_s if timeout_s is None else timeout_s
        try:
            return await asyncio.wait_for(coro, timeout_s)
        except (A.ActionError, SandboxCrashed):
            raise
        except TimeoutError:
            raise SandboxCrashed(f"{what} did not finish within {timeout_s:g} s") from None

    async def _obs(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        screenshot, text, meta = await self._call("observing the sandbox", self._observe())
        meta = {**meta, "step": self._steps, **(extra or {})}
        return {
            "screenshot": screenshot,
            "text": S.sanitize(text, S.MAX_TEXT),
            "instruction": S.sanitize(self._instruction, S.MAX_INSTRUCTION),
            "metadata": S.sanitize(json.dumps(meta, default=str), S.MAX_METADATA),
        }

    def _blank_obs(self, reason: str) -> dict[str, Any]:
        return {
            "screenshot": np.zeros((self.height, self.width, 3), np.uint8),
            "text": "",
            "instruction": S.sanitize(self._instruction, S.MAX_INSTRUCTION),
            "metadata": S.sanitize(json.dumps({"error": reason}), S.MAX_METADATA),
        }

    def decode_action(self, action: Any) -> A.Action:
        if self.action_format == "text":
            return A.parse_action(action)
        return S.from_structured(action)

    # ------------------------------------------------------------ episode logic

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        start = time.perf_counter()
        if self._crashed is not None and self._launched:
            await self._shutdown()
            self._launched = False
        if not self._launched:
            await self._call(
                "launching the sandbox",
                self._launch(),
                max(self.op_timeout_s, self.launch_timeout_s),
            )
            self._launched = True
            self._crashed = None
        self._steps = 0
        try:
            self._instruction = await self._call(
                "starting the episode", self._start_episode(seed, dict(options or {}))
            )
            if self.task.instruction is not None:
                self._instruction = self.task.instruction
            obs = await self._obs()
        except SandboxCrashed as e:
            self._crashed = str(e)  # the next reset relaunches the sandbox
            raise
        self.timings["reset_s"] = time.perf_counter() - start
        return obs, {
            "task": self.task.id,
            "feasible": self.task.feasible,
            "reset_s": self.timings["reset_s"],
        }

    async def astep(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self._steps += 1
        truncated = self._steps >= self.task.max_steps
        try:
            return await self._step(action, truncated)
        except SandboxCrashed as e:
            self._crashed = str(e)
            return self._blank_obs(str(e)), 0.0, False, True, {TRUNCATED_REASON: f"sandbox: {e}"}

    async def _step(self, raw: Any, truncated: bool):
        try:
            action = self.decode_action(raw)
        except A.ActionError as e:
            return await self._noop(e, truncated)
        if isinstance(action, A.Fail):
            reward = 0.0 if self.task.feasible else 1.0
            return (
                await self._obs({"last_action": "fail()"}),
                reward,
                True,
                False,
                {"declared": "fail"},
            )
        if isinstance(action, A.Done):
            reward = await self._call("evaluating the task", self._evaluate_done())
            if not self.task.feasible:
                reward = 0.0
            return (
                await self._obs({"last_action": "done()"}),
                reward,
                True,
                False,
                {"declared": "done"},
            )
        try:
            await self._call("performing the action", self._perform(action))
        except A.ActionError as e:
            return await self._noop(e, truncated)
        extra = {"last_action": A.format_action(action)}
        if self.observe_while_evaluating:
            (reward, done, info), obs = await both(
                self._call("evaluating the task", self._evaluate()), self._obs(extra)
            )
        else:
            reward, done, info = await self._call("evaluating the task", self._evaluate())
            obs = await self._obs(extra)
        if not self.task.feasible:
            # the page's own evaluation does not count: only fail() is right; keep it apart
            reward, info = 0.0, {"infeasible_task": True, "page_info": info}
        return obs, float(reward), bool(done), truncated and not done, info

    async def _noop(self, error: Exception, truncated: bool):
        message = str(error)
        obs = await self._obs({"action_error": message})
        return obs, 0.0, False, truncated, {"action_error": message}

    async def aclose(self) -> None:
        if self._launched:
            self._launched = False
            await self._shutdown()

    # ------------------------------------------------------------ sync facade

    def _run(self, coro: Any) -> Any:
        """Run ``coro`` on the env's event loop, which lives in its own thread, so
        background work (a browser preparing the next episode) goes on between calls."""
        if self._loop is None or self._loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name=f"farm-gui-{self.task.id}", daemon=True
            )
            thread.start()
            self._loop, self._loop_thread = loop, thread
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self._run(self.areset(seed=seed, options=options))

    def step(self, action: Any):
        return self._run(self.astep(action))

    def close(self) -> None:
        loop, thread = self._loop, self._loop_thread
        if loop is None or loop.is_closed():
            return
        try:
            self._run(self.aclose())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout=10)
            if not loop.is_running():
                loop.close()


async def both(first: Any, second: Any) -> tuple[Any, Any]:
    """Await two coroutines concurrently; if one fails, cancel the other and raise."""
    tasks = (asyncio.ensure_future(first), asyncio.ensure_future(second))
    try:
        a, b = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return a, b


class RefView(Protocol):
    """A text view's elements by ref (what ``*_element`` actions act on)."""

    def by_ref(self, ref: int) -> Any: ...

    def refs(self) -> str: ...


class CheckedGuiEnv(GuiEnv):
    """A GUI env over a real sandbox whose task a checker scores (desktop, Android).

    The sandbox's I/O blocks: the adapter implements the hooks as sync methods
    (``_launch_sync``, ``_shutdown_sync``, ``_start_episode_sync``,
    ``_perform_sync``, ``_observe_sync``), which run in a thread, and
    :meth:`_checker`. Rewards: the task's checker runs at ``done()``
    (``info["check"]``: what it reports); steps earn 0. One of
    :attr:`episode_errors` (a :class:`~env_adapters.gui.tasks.CheckerError`)
    during a step ends the episode truncated with its reason, the sandbox
    observed as it is. The ``*_element`` actions act on ``_last_view``, the
    elements of the last observation.
    """

    #: errors of a step that end the episode truncated (the sandbox itself is fine)
    episode_errors: ClassVar[tuple[type[Exception], ...]] = (CheckerError,)
    #: longest text ``type``/``type_element`` accept
    max_type_chars: int
    _last_view: RefView
    _check_info: dict[str, Any]

    # ------------------------------------------------------------ sync hooks

    def _launch_sync(self) -> None:
        raise NotImplementedError

    def _shutdown_sync(self) -> None:
        raise NotImplementedError

    def _start_episode_sync(self, seed: int | None) -> str:
        raise NotImplementedError

    def _perform_sync(self, action: A.Action) -> None:
        raise NotImplementedError

    def _observe_sync(self) -> tuple[np.ndarray, str, dict[str, Any]]:
        raise NotImplementedError

    def _checker(self) -> tuple[TaskLogic[Any], Any]:
        """The task's logic and the context its checker reads."""
        raise NotImplementedError

    # ------------------------------------------------------------ GuiEnv hooks

    async def _launch(self) -> None:
        await asyncio.to_thread(self._launch_sync)

    async def _shutdown(self) -> None:
        await asyncio.to_thread(self._shutdown_sync)

    async def _start_episode(self, seed: int | None, options: dict[str, Any]) -> str:
        return await asyncio.to_thread(self._start_episode_sync, seed)

    async def _perform(self, action: A.Action) -> None:
        await asyncio.to_thread(self._perform_sync, action)

    async def _observe(self) -> tuple[np.ndarray, str, dict[str, Any]]:
        return await asyncio.to_thread(self._observe_sync)

    async def _evaluate(self) -> tuple[float, bool, dict[str, Any]]:
        return 0.0, False, {}  # the checker runs at done()

    async def _evaluate_done(self) -> float:
        return await asyncio.to_thread(self._check_sync)

    def _check_sync(self) -> float:
        logic, ctx = self._checker()
        try:
            reward, info = logic.check(ctx)
        except (CheckerError, SandboxCrashed):
            raise
        except Exception as e:
            raise CheckerError(
                f"the checker of {self.task.id} raised {type(e).__name__}: {e}"
            ) from e
        self._check_info = info
        return float(reward)

    async def astep(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self._check_info = {}
        try:
            obs, reward, terminated, truncated, info = await super().astep(action)
        except self.episode_errors as e:
            return await self._truncate(e)
        if self._check_info:
            info = {**info, "check": self._check_info}
        return obs, reward, terminated, truncated, info

    async def _truncate(
        self, error: Exception, kind: str = "checker"
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """The step that ends the episode truncated for ``error``
        (``info["farm.truncated_reason"]``: ``"<kind>: <error>"``)."""
        try:
            obs = await self._obs({"error": str(error)})
        except SandboxCrashed as crash:
            self._crashed = str(crash)
            obs = self._blank_obs(str(error))
        return obs, 0.0, False, True, {TRUNCATED_REASON: f"{kind}: {error}"}

    # ------------------------------------------------------------ helpers

    def _episode_rng(self, seed: int | None) -> np.random.Generator:
        """The generator of an episode's task setup: from ``seed``, else from the env's."""
        episode_seed = int(seed) if seed is not None else int(self.np_random.integers(1 << 31))
        return np.random.default_rng(episode_seed)

    def _check_text(self, text: str) -> None:
        if len(text) > self.max_type_chars:
            raise A.ActionError(
                f"text of {len(text):,} characters is longer than the limit of "
                f"{self.max_type_chars:,} characters per type action; type it in parts"
            )

    def _element(self, ref: int) -> Any:
        """The element ``ref`` of the last text view."""
        element = self._last_view.by_ref(ref)
        if element is None:
            raise A.ActionError(
                f"no element with ref {ref}; refs in the text view are {self._last_view.refs()}"
            )
        return element

    def _wait(self, action: A.Wait) -> None:
        longest = max(0.0, self.op_timeout_s - 0.5)
        if action.ms / 1000 > longest:
            raise A.ActionError(
                f"wait({action.ms}) is longer than this env allows ({longest * 1000:.0f} ms)"
            )
        time.sleep(action.ms / 1000)
