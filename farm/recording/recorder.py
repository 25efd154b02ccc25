"""Recording the episodes of any env farm serves (sync or async), or a job plays.

:func:`record` wraps an env instance; :func:`recording_factory` wraps a factory
(what ``farm serve --record DIR`` does per session). The wrapper forwards
everything to the env and, per reset/step, hands a snapshot (arrays copied) to
a :class:`Recorder`, whose single background thread encodes frames and writes
the episode directory (:mod:`farm.recording.writer`). So a step waits only for
the snapshot, never for the disk.

Recording never takes the env down: a failed write (disk full, permissions)
is logged, reported once in the next step's or reset's ``info`` under
``"farm.recording.error"``, and recording stops for that episode (the next
reset tries again with a new episode). The episode id is reported in the reset
``info`` under ``"farm.recording.episode"``.

Trainers attach annotations (policy version, model output, token
log-probabilities, ...) with :meth:`RecordingEnv.annotate` (to the last step)
or :meth:`RecordingEnv.annotate_next` (merged into the next step's record).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from typing import Any

import numpy as np

from farm.env import TRUNCATED_REASON, is_async_env
from farm.recording import format as F
from farm.recording.writer import EpisodeWriter, FileOps, RecordingFailed

log = logging.getLogger("farm.recording")

EPISODE_KEY = "farm.recording.episode"
ERROR_KEY = "farm.recording.error"

#: distributions whose versions are recorded, per env id namespace
_NAMESPACE_DISTS = {
    "miniwob": ("miniwob", "playwright"),
    "desktop": ("python-xlib", "mss"),
}


@dataclass
class RecordingConfig:
    """Where and how episodes of one env are recorded.

    Attributes:
        root: the store directory (created if missing).
        env_id: the env id as ``farm serve`` / ``registry.make`` takes it (for replay).
        env_kwargs: its keyword arguments (for replay).
        job: the job that plays the episodes (``farm episodes ls --job``).
        fsync: fsync every record (crash consistency across power loss, not only
            process death).
        max_pending_bytes: if the writer falls this far behind, the episode's
            recording stops (memory is bounded, the env is never slowed down).
        ops: the writer's file layer (tests inject failures here).
    """

    root: str
    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    job: str | None = None
    fsync: bool = True
    max_pending_bytes: int = 256 << 20
    ops: FileOps | None = None


def _snapshot(value: Any) -> Any:
    """A copy of ``value``'s arrays (the env may reuse its buffers); other leaves shared."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_snapshot(v) for v in value)
    if isinstance(value, list):
        return [_snapshot(v) for v in value]
    return value


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    return 64


def _versions(env_id: str, env: Any) -> dict[str, str]:
    out = {"python": platform.python_version()}
    dists = ("farm", "gymnasium", "numpy", *_NAMESPACE_DISTS.get(env_id.split("/", 1)[0], ()))
    for dist in dists:
        with contextlib.suppress(importlib_metadata.PackageNotFoundError):
            out[dist] = importlib_metadata.version(dist)
    extra = (getattr(env, "metadata", None) or {}).get("farm.versions")
    if isinstance(extra, dict):
        out.update({str(k): str(v) for k, v in extra.items()})
    return out


class Recorder:
    """Writes the episodes of one env instance from a background thread."""

    def __init__(self, config: RecordingConfig, env: Any = None) -> None:
        self.config = config
        self._env = env
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm-recorder")
        self._lock = threading.Lock()
        self._writer: EpisodeWriter | None = None
        self._episode_id: str | None = None
        self._stopped = False  # recording of the current episode stopped (failure)
        self._error: str | None = None  # a failure not yet reported in info
        self._pending = 0
        self._steps = 0
        self._return = 0.0
        self._next_annotations: dict[str, Any] = {}
        self._spaces: tuple[str | None, str | None] | None = None
        self._last: tuple[EpisodeWriter, int] | None = None  # the episode that ended last
        self._versions: dict[str, str] = {}
        self.episodes_started = 0
        self.failures = 0

    # ------------------------------------------------------------ the env's calls

    @property
    def episode_id(self) -> str | None:
        return self._episode_id

    @property
    def recording(self) -> bool:
        """Whether an episode is being recorded now."""
        return self._episode_id is not None and not self._stopped

    def on_reset(
        self,
        seed: int | None,
        options: dict[str, Any] | None,
        obs: Any,
        info: dict[str, Any],
        duration_s: float,
    ) -> dict[str, Any]:
        """Start a new episode; returns the keys to add to the reset ``info``."""
        if self._episode_id is not None:
            self._end("abandoned", "reset before the episode ended")
        self._last = None
        env = self._env
        if self._spaces is None:  # once per env instance: neither changes
            self._spaces = (
                F.space_to_b64(getattr(env, "observation_space", None)),
                F.space_to_b64(getattr(env, "action_space", None)),
            )
            self._versions = _versions(self.config.env_id, env)
        env_meta = getattr(env, "metadata", None) or {}
        cfg = self.config
        meta = F.EpisodeMeta(
            episode_id=F.new_episode_id(cfg.env_id),
            env_id=cfg.env_id,
            env_kwargs=F.jsonable(cfg.env_kwargs),
            seed=seed,
            options=F.jsonable(options) if options else None,
            task=env_meta.get("farm.task"),
            kind=env_meta.get("farm.kind"),
            job=cfg.job,
            versions=dict(self._versions),
            observation_space=self._spaces[0],
            action_space=self._spaces[1],
        )
        self._episode_id = meta.episode_id
        self._stopped = False
        self._steps = 0
        self._return = 0.0
        self._next_annotations = {}
        self.episodes_started += 1
        writer = EpisodeWriter(cfg.root, meta, fsync=cfg.fsync, ops=cfg.ops)
        self._writer = writer
        record = {
            "type": "reset",
            "t": time.time(),
            "duration_s": duration_s,
            "seed": seed,
            "obs": _snapshot(obs),
            "info": dict(info),
        }
        self._submit(writer, writer.start)
        self._submit_record(writer, record)
        extra = self._take_error()
        extra[EPISODE_KEY] = meta.episode_id
        return extra

    def on_step(
        self,
        action: Any,
        obs: Any,
        reward: Any,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
        duration_s: float,
    ) -> dict[str, Any]:
        """Record a step; returns the keys to add to the step ``info`` (errors only)."""
        if self._episode_id is None:
            return self._take_error()
        self._steps += 1
        self._return += float(reward)
        if not self._stopped and self._writer is not None:
            record: dict[str, Any] = {
                "type": "step",
                "i": self._steps,
                "t": time.time(),
                "duration_s": duration_s,
                "action": _snapshot(action),
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "obs": _snapshot(obs),
                "info": dict(info),
            }
            if self._next_annotations:
                record["annotations"] = self._next_annotations
                self._next_annotations = {}
            self._submit_record(self._writer, record)
        if terminated or truncated:
            reason = info.get(TRUNCATED_REASON)
            outcome = F.outcome_of(bool(terminated), bool(truncated), self._return, reason)
            self._end(outcome, str(reason) if reason else None, terminated, truncated)
        return self._take_error()

    def on_step_error(self, exc: BaseException) -> None:
        """The env raised in ``step``: its episode is over."""
        if self._episode_id is not None:
            self._end("error", f"env.step() raised {type(exc).__name__}: {exc}")

    def annotate(self, step: int | None = None, **data: Any) -> None:
        """Attach ``data`` to step ``step`` (default: the last one; 0 is the reset)."""
        if self._episode_id is not None:
            if self._stopped or self._writer is None:
                return
            writer, steps = self._writer, self._steps
        elif self._last is not None:
            writer, steps = self._last  # the episode just ended: annotate its last steps
        else:
            return
        i = steps if step is None else int(step)
        rec = {"type": "annotation", "i": i, "data": F.jsonable(data)}
        self._submit(writer, lambda: writer.append_late(rec))

    def annotate_next(self, **data: Any) -> None:
        """Attach ``data`` to the next step's record (written with it, atomically)."""
        self._next_annotations.update(F.jsonable(data))

    def flush(self, timeout: float | None = 30.0) -> None:
        """Wait until everything submitted so far is on disk (or failed)."""
        self._pool.submit(lambda: None).result(timeout)

    def close(self) -> None:
        """End the current episode (``abandoned``) and wait for the writes."""
        if self._episode_id is not None:
            self._end("abandoned", "the env was closed before the episode ended")
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------ internals

    def _end(
        self,
        outcome: str,
        reason: str | None,
        terminated: bool = False,
        truncated: bool = False,
    ) -> None:
        writer = self._writer
        if writer is not None and not self._stopped:
            record = {
                "type": "end",
                "t": time.time(),
                "outcome": outcome,
                "reason": reason,
                "steps": self._steps,
                "return": self._return,
                "terminated": terminated,
                "truncated": truncated,
            }
            self._submit(writer, lambda: writer.end(record))
            self._last = (writer, self._steps)
        self._episode_id = None
        self._writer = None

    def _submit_record(self, writer: EpisodeWriter, record: dict[str, Any]) -> None:
        size = _nbytes(record.get("obs")) + 1024
        with self._lock:
            if self._pending + size > self.config.max_pending_bytes:
                self._stop(
                    writer,
                    f"the recorder fell behind by more than {self.config.max_pending_bytes} "
                    "bytes; recording of this episode stopped",
                )
                return
            self._pending += size

        def work() -> None:
            try:
                frames: dict[str, np.ndarray] = {}
                for key in ("obs", "action"):
                    if key in record:
                        record[key] = F.encode_value(record[key], frames)
                record["info"] = F.jsonable(record.get("info") or {})
                writer.append(record, frames)
            finally:
                with self._lock:
                    self._pending -= size

        self._submit(writer, work)

    def _submit(self, writer: EpisodeWriter, fn: Callable[[], None]) -> None:
        def run() -> None:
            if writer.failed is not None:
                return  # already failed and reported; drop the rest of this episode
            try:
                fn()
            except RecordingFailed as e:
                self._stop(writer, str(e))
            except Exception as e:  # noqa: BLE001 - a recorder bug must not hurt the env
                writer.failed = f"recording failed: {type(e).__name__}: {e}"
                writer.close()
                self._stop(writer, writer.failed)

        with contextlib.suppress(RuntimeError):  # shut down
            self._pool.submit(run)

    def _stop(self, writer: EpisodeWriter, message: str) -> None:
        with self._lock:
            self.failures += 1
            if writer.failed is None:
                writer.failed = message
            self._error = f"episode {writer.meta.episode_id}: {message}"
            if self._writer is writer:
                self._stopped = True
        log.error("recording failed (the env keeps serving): %s", self._error)

    def _take_error(self) -> dict[str, Any]:
        with self._lock:
            if self._error is None:
                return {}
            if self._writer is not None and self._writer.failed is not None:
                self._stopped = True
            error, self._error = self._error, None
        return {ERROR_KEY: error}


_OWN = frozenset({"areset", "astep", "aclose"})


class RecordingEnv:
    """A sync env whose episodes are recorded; everything else is forwarded."""

    def __init__(self, env: Any, config: RecordingConfig) -> None:
        self.env = env
        self.recorder = Recorder(config, env)

    def __getattr__(self, name: str) -> Any:
        if name in _OWN or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def observation_space(self) -> Any:
        return self.env.observation_space

    @property
    def action_space(self) -> Any:
        return self.env.action_space

    @property
    def metadata(self) -> dict[str, Any]:
        return getattr(self.env, "metadata", None) or {}

    @property
    def unwrapped(self) -> Any:
        return getattr(self.env, "unwrapped", self.env)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        start = time.perf_counter()
        obs, info = self.env.reset(seed=seed, options=options)
        info = {
            **info,
            **self.recorder.on_reset(seed, options, obs, info, time.perf_counter() - start),
        }
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        start = time.perf_counter()
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as e:
            self.recorder.on_step_error(e)
            raise
        extra = self.recorder.on_step(
            action, obs, reward, terminated, truncated, info, time.perf_counter() - start
        )
        return obs, reward, terminated, truncated, {**info, **extra} if extra else info

    def close(self) -> None:
        try:
            self.env.close()
        finally:
            self.recorder.close()

    def annotate(self, step: int | None = None, **data: Any) -> None:
        """Attach ``data`` (policy version, model output, log-probs) to a recorded step."""
        self.recorder.annotate(step, **data)

    def annotate_next(self, **data: Any) -> None:
        """Attach ``data`` to the next step's record."""
        self.recorder.annotate_next(**data)


class AsyncRecordingEnv(RecordingEnv):
    """The async form (``areset``/``astep``/``aclose``), for async sandboxes."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.env, name)

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        start = time.perf_counter()
        obs, info = await self.env.areset(seed=seed, options=options)
        info = {
            **info,
            **self.recorder.on_reset(seed, options, obs, info, time.perf_counter() - start),
        }
        return obs, info

    async def astep(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        start = time.perf_counter()
        try:
            obs, reward, terminated, truncated, info = await self.env.astep(action)
        except Exception as e:
            self.recorder.on_step_error(e)
            raise
        extra = self.recorder.on_step(
            action, obs, reward, terminated, truncated, info, time.perf_counter() - start
        )
        return obs, reward, terminated, truncated, {**info, **extra} if extra else info

    async def aclose(self) -> None:
        try:
            await self.env.aclose()
        finally:
            await asyncio.to_thread(self.recorder.close)


def record(env: Any, config: RecordingConfig) -> RecordingEnv:
    """Wrap ``env`` (sync or async) so its episodes are recorded as ``config`` says."""
    if is_async_env(env):
        return AsyncRecordingEnv(env, config)
    return RecordingEnv(env, config)


def recording_factory(factory: Callable[[], Any], config: RecordingConfig) -> Callable[[], Any]:
    """A factory whose envs record (one :class:`Recorder` per env instance)."""

    def make() -> Any:
        return record(factory(), config)

    make.__name__ = getattr(factory, "__name__", "env")
    return make


def store_root(path: str) -> str:
    """``path`` made absolute, creating it (``farm serve --record`` fails early if it cannot)."""
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    if not os.access(path, os.W_OK):
        raise PermissionError(f"episode store {path} is not writable")
    return path
