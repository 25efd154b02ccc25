"""The sandboxes a job plays on: leased from a farm, from a farm started for the
job, or made in-process; handed to rollouts one at a time.

A sandbox whose episode was cut by infrastructure (its server died, its lease
was lost) is put aside and replaced in the background: a new lease (the farm
restarts the dead one) or a new in-process env.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from farm.env import EnvRunner
from farm.errors import FarmError
from farm.recording.recorder import Recorder, RecordingConfig
from trainer.api.spec import SandboxSpec
from trainer.errors import JobSpecError, TrainerError

log = logging.getLogger("farm.trainer.sandboxes")


@dataclass
class Sandbox:
    """One env the job holds (``reset``/``step`` are awaitable, gymnasium semantics)."""

    name: str
    env: Any  # AsyncRemoteEnv or EnvRunner
    lease: Any = None
    recorder: Recorder | None = None
    episodes: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    async def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict]:
        return await self.env.reset(seed=seed, options=options)

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return await self.env.step(action)

    def lost(self) -> str | None:
        return getattr(self.lease, "lost", None)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.env.close()
        if self.recorder is not None:
            with contextlib.suppress(Exception):
                self.recorder.close()
        if self.lease is not None:
            with contextlib.suppress(Exception):
                await self.lease.release()


class SandboxPool:
    """``count`` sandboxes of ``spec.env`` (see :class:`~trainer.api.spec.SandboxSpec`)."""

    def __init__(
        self,
        spec: SandboxSpec,
        *,
        job: str,
        record_dir: str | None = None,
        progress: Any = None,
    ) -> None:
        self.spec = spec
        self.job = job
        self.record_dir = record_dir
        self.source = spec.source
        self.address: str | None = None
        self._free: list[Sandbox] = []
        self._waiters: list[tuple[str | None, asyncio.Future[Sandbox]]] = []
        self._all: dict[str, Sandbox] = {}
        self._client: Any = None
        self._farm: Any = None  # a BackgroundController started for the job
        self._state_dir: str | None = None
        self._replacing: set[asyncio.Task[None]] = set()
        self._serial = 0
        self.replaced = 0
        self.progress = progress
        self.closed = False

    # ------------------------------------------------------------------ start

    async def start(self) -> None:
        spec = self.spec
        if self.source == "auto":
            self.source = "farm" if await self._farm_has_env() else "job"
        if self.source == "inprocess":
            await asyncio.gather(*(self._add_inprocess() for _ in range(spec.count)))
            return
        if self.source == "job":
            await self._start_job_farm()
        else:
            await self._check_farm()
        await asyncio.gather(*(self._add_leased() for _ in range(spec.count)))

    async def _farm_has_env(self) -> bool:
        from orchestration.client import AsyncFarmClient, default_address

        try:
            address = self.spec.farm or default_address()
            client = AsyncFarmClient(address, holder=f"job {self.job}")
        except FarmError:
            return False
        try:
            status = await client.status(timeout=3.0)
        except FarmError:
            return False
        finally:
            await client.close()
        return any(s.env == self.spec.env for s in status.sandboxes)

    async def _check_farm(self) -> None:
        from orchestration.client import AsyncFarmClient, default_address

        self.address = self.spec.farm or default_address()
        self._client = AsyncFarmClient(self.address, holder=f"job {self.job} (pid {os.getpid()})")
        status = await self._client.status()
        have = [s for s in status.sandboxes if s.env == self.spec.env]
        if len(have) < self.spec.count:
            raise JobSpecError(
                f"sandboxes.count: the job asks for {self.spec.count} sandboxes of "
                f"{self.spec.env}, but the farm at {self.address} has {len(have)}"
                + (f" (it runs: {sorted({s.env for s in status.sandboxes})})" if not have else "")
            )

    async def _start_job_farm(self) -> None:
        from orchestration.client import AsyncFarmClient
        from orchestration.runtime import BackgroundController
        from orchestration.spec import parse_spec

        # a short private state dir: its control socket path must fit in sun_path
        self._state_dir = tempfile.mkdtemp(prefix="farm-job-")
        farm_spec = parse_spec(
            {
                "state_dir": self._state_dir,
                "control": {"metrics_port": None},
                "restart": {"backoff_s": 0.5},
                "sandboxes": [
                    {
                        "kind": self.spec.kind,
                        "env": self.spec.env,
                        "count": self.spec.count,
                        "backend": self.spec.backend,
                        "env_kwargs": dict(self.spec.env_kwargs),
                        "startup_timeout_s": 120.0,
                    }
                ],
            },
            "the job's farm",
        )
        bg = BackgroundController(farm_spec)
        await asyncio.to_thread(bg.start)
        self._farm = bg
        try:
            await asyncio.to_thread(bg.wait_healthy, 180.0)
        except BaseException:
            await asyncio.to_thread(bg.stop)
            self._farm = None
            raise
        self.address = farm_spec.control_address
        self._client = AsyncFarmClient(self.address, holder=f"job {self.job} (pid {os.getpid()})")

    def _recorder(self, env: Any) -> Recorder | None:
        if self.record_dir is None:
            return None
        cfg = RecordingConfig(
            root=self.record_dir,
            env_id=self.spec.env,
            env_kwargs=dict(self.spec.env_kwargs),
            job=self.job,
            fsync=False,
        )
        return Recorder(cfg, env)

    async def _add_inprocess(self) -> None:
        from farm.registry import resolve

        factory = resolve(self.spec.env, **self.spec.env_kwargs)
        runner = await EnvRunner.create(factory, "thread")
        self._serial += 1
        sb = Sandbox(
            f"inproc-{self._serial}", _RunnerEnv(runner), recorder=self._recorder(runner.env)
        )
        self._all[sb.name] = sb
        self._put(sb)

    async def _add_leased(self) -> None:
        import farm

        lease = await self._client.lease(self.spec.env, wait_timeout_s=self.spec.lease_timeout_s)
        try:
            env = await farm.aconnect(lease.endpoint, reconnect=False)
        except BaseException:
            await lease.release(reset=True)
            raise
        sb = Sandbox(lease.sandbox_id, env, lease=lease, recorder=self._recorder(env))
        self._all[sb.name] = sb
        self._put(sb)

    # ------------------------------------------------------------------ use

    @property
    def size(self) -> int:
        return len(self._all)

    @property
    def free(self) -> int:
        return len(self._free)

    async def acquire(self, prefer: str | None = None) -> Sandbox:
        """A free sandbox, first come first served; among free ones, one whose last
        episode ran task ``prefer`` (a browser then has that task's page preloaded)."""
        if self.closed:
            raise TrainerError("the sandbox pool is closed")
        if self._free and not self._waiters:
            return self._take(prefer)
        fut: asyncio.Future[Sandbox] = asyncio.get_running_loop().create_future()
        self._waiters.append((prefer, fut))
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._put(fut.result())  # it was handed over as we were cancelled
            else:
                self._waiters = [w for w in self._waiters if w[1] is not fut]
            raise

    def _take(self, prefer: str | None) -> Sandbox:
        for i, sb in enumerate(self._free):
            if prefer is not None and sb.meta.get("task") == prefer:
                return self._free.pop(i)
        return self._free.pop(0)

    def _put(self, sb: Sandbox) -> None:
        """Hand ``sb`` to the first of the next few waiters that prefers its last task,
        else to the first waiter (roughly first come, first served)."""
        self._waiters = [w for w in self._waiters if not w[1].done()]
        if not self._waiters:
            self._free.append(sb)
            return
        window = self._waiters[: max(2, len(self._all))]
        chosen = next((w for w in window if w[0] == sb.meta.get("task")), self._waiters[0])
        self._waiters.remove(chosen)
        chosen[1].set_result(sb)

    def release(self, sb: Sandbox, broken: str | None = None) -> None:
        """Hand ``sb`` back; ``broken``: it failed, replace it (in the background)."""
        if self.closed:
            return
        if broken is None and sb.lost() is None:
            self._put(sb)
            return
        log.warning("sandbox %s is replaced: %s", sb.name, broken or sb.lost())
        self._all.pop(sb.name, None)
        task = asyncio.get_running_loop().create_task(self._replace(sb))
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    async def _replace(self, sb: Sandbox) -> None:
        self.replaced += 1
        if sb.lease is not None:
            with contextlib.suppress(Exception):
                await sb.lease.release(reset=True)
            sb.lease = None
        await sb.close()
        delay = 0.5
        while not self.closed:
            try:
                if self.source == "inprocess":
                    await self._add_inprocess()
                else:
                    await self._add_leased()
                return
            except FarmError as e:
                log.warning("could not replace sandbox %s yet: %s", sb.name, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def close(self) -> None:
        self.closed = True
        for task in list(self._replacing):
            task.cancel()
        await asyncio.gather(*(sb.close() for sb in self._all.values()), return_exceptions=True)
        self._all.clear()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
        if self._farm is not None:
            started = time.monotonic()
            await asyncio.to_thread(self._farm.stop)
            log.info("stopped the job's farm in %.1f s", time.monotonic() - started)
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)


class _RunnerEnv:
    """An in-process env behind the same awaitable reset/step/close as a remote one."""

    def __init__(self, runner: EnvRunner) -> None:
        self.runner = runner
        self.env = runner.env
        self.observation_space = runner.observation_space
        self.action_space = runner.action_space

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return await self.runner.reset(seed, options)

    async def step(self, action: Any):
        return await self.runner.step(action)

    async def close(self) -> None:
        await self.runner.close()
