"""Remote environments that behave like local ones.

:class:`AsyncRemoteEnv` (asyncio) and :class:`RemoteEnv` (a ``gymnasium.Env``)
share one behaviour:

* spaces are rebuilt exactly from the server's description;
* errors are raised from the :mod:`farm.errors` tree (a bad action raises
  :class:`~farm.errors.InvalidArgumentError`; the session stays usable);
* when the sandbox goes away mid-episode, ``step`` returns the last
  observation with ``truncated=True`` and ``info["farm.truncated_reason"]``:
  the episode is reported cut, never silently resumed. The next ``reset``
  opens a new session (retrying for ``reconnect_timeout_s``) or raises
  :class:`~farm.errors.SandboxUnavailableError` saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, SupportsFloat

import gymnasium as gym

from farm.client.session import AsyncSession
from farm.env import TRUNCATED_REASON
from farm.errors import FailedPreconditionError, FarmError, SandboxUnavailableError


class AsyncRemoteEnv:
    """An env served by farm, for asyncio code. Create with :func:`aconnect`."""

    def __init__(
        self,
        session: AsyncSession,
        open_kwargs: dict[str, Any],
        reconnect: bool,
        reconnect_timeout_s: float,
    ) -> None:
        self._session: AsyncSession | None = session
        self._open_kwargs = open_kwargs
        self.address = session.address
        self.observation_space = session.observation_space
        self.action_space = session.action_space
        self.metadata = session.metadata
        self.env_id = session.env_id
        self.reconnect = reconnect
        self.reconnect_timeout_s = reconnect_timeout_s
        self._last_obs: Any = None
        self._lost: str | None = None
        self.closed = False

    @property
    def session(self) -> AsyncSession | None:
        """The live session, or None after the sandbox went away."""
        return self._session

    async def _reopen(self) -> AsyncSession:
        deadline = time.monotonic() + self.reconnect_timeout_s
        delay = 0.05
        while True:
            # no single attempt may outlast the deadline (a stale unix socket file or an
            # unreachable host would otherwise hold each attempt for the full open timeout)
            remaining = deadline - time.monotonic()
            timeout = max(0.1, min(self._open_kwargs.get("timeout", 10.0), remaining))
            try:
                session = await AsyncSession.open(
                    self.address, **{**self._open_kwargs, "timeout": timeout}
                )
                break
            except SandboxUnavailableError as e:
                if time.monotonic() + delay > deadline:
                    raise SandboxUnavailableError(
                        f"the sandbox at {self.address} went away ({self._lost}) and did not "
                        f"come back within {self.reconnect_timeout_s:g} s: {e.args[0]}"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        if (
            session.observation_space != self.observation_space
            or session.action_space != self.action_space
        ):
            await session.close()
            raise SandboxUnavailableError(
                f"the sandbox at {self.address} came back with different spaces; not reusing it"
            )
        self._lost = None
        return session

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self.closed:
            raise FarmError("reset() on a closed env")
        if self._session is None:
            if not self.reconnect:
                raise SandboxUnavailableError(
                    f"the sandbox at {self.address} went away: {self._lost}"
                )
            self._session = await self._reopen()
        try:
            obs, info = await self._session.reset(seed, options)
        except SandboxUnavailableError as e:
            await self._drop(e)
            if not self.reconnect:
                raise
            self._session = await self._reopen()
            obs, info = await self._session.reset(seed, options)
        self._last_obs = obs
        return obs, info

    async def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._session is None:
            if self.closed:
                raise FarmError("step() on a closed env")
            raise FailedPreconditionError(
                f"the last episode was truncated because the sandbox went away ({self._lost}); "
                "call reset()"
            )
        try:
            result = await self._session.step(action)
        except SandboxUnavailableError as e:
            await self._drop(e)
            if not self.reconnect or self._last_obs is None:
                raise
            return self._last_obs, 0.0, False, True, {TRUNCATED_REASON: f"sandbox unavailable: {e}"}
        self._last_obs = result[0]
        return result

    async def _drop(self, err: Exception) -> None:
        self._lost = str(err)
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):  # it is already gone
                await session.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


async def aconnect(
    address: str,
    *,
    token: str | None = None,
    image_encoding: str = "raw",
    jpeg_quality: int = 0,
    timeout: float = 10.0,
    reconnect: bool = True,
    reconnect_timeout_s: float = 30.0,
) -> AsyncRemoteEnv:
    """Open a session on the farm server at ``address`` (asyncio form of :func:`connect`)."""
    kwargs = {
        "token": token,
        "image_encoding": image_encoding,
        "jpeg_quality": jpeg_quality,
        "timeout": timeout,
    }
    session = await AsyncSession.open(address, **kwargs)
    return AsyncRemoteEnv(session, kwargs, reconnect, reconnect_timeout_s)


class RemoteEnv(gym.Env):
    """A ``gymnasium.Env`` whose instance lives in a farm server. Create with :func:`connect`.

    Calls run on a private event loop in the calling thread; inside asyncio
    code use :func:`aconnect` instead.
    """

    def __init__(self, address: str, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._aenv: AsyncRemoteEnv = self._run(aconnect(address, **kwargs))
        except BaseException:
            self._loop.close()
            raise
        self.observation_space = self._aenv.observation_space
        self.action_space = self._aenv.action_space
        self.metadata = dict(self._aenv.metadata)
        self.render_mode = None
        self.address = address

    def _run(self, coro: Any) -> Any:
        if asyncio._get_running_loop() is None:  # (get_running_loop() raises instead)
            return self._loop.run_until_complete(coro)
        coro.close()
        raise FarmError(
            "RemoteEnv is synchronous and cannot be used inside a running event loop; "
            "use `await farm.aconnect(...)` there"
        )

    @property
    def session_id(self) -> str | None:
        s = self._aenv.session
        return s.session_id if s is not None else None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self._run(self._aenv.reset(seed=seed, options=options))

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        return self._run(self._aenv.step(action))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self._aenv.close())
        finally:
            self._loop.close()


def connect(address: str, **kwargs: Any) -> RemoteEnv:
    """Open a session on the farm server at ``address`` and return it as a ``gymnasium.Env``.

    Args:
        address: ``unix:///path`` or ``HOST:PORT``.
        token: shared token, if the server requires one.
        image_encoding: ``"raw"`` (default), ``"png"`` or ``"jpeg"`` for uint8 images.
        timeout: seconds to wait for the server when connecting.
        reconnect: report lost sandboxes as truncated episodes and reconnect on reset.
        reconnect_timeout_s: how long a reset keeps trying to reach the sandbox again.
    """
    return RemoteEnv(address, **kwargs)
