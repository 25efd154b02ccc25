"""``farm replay``: re-run a recorded episode in a fresh env and compare, step by step."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from farm.errors import EnvNotFoundError, MissingExtraError
from farm.recording import format as F
from farm.recording.compare import StepComparison, Tolerance, compare_obs
from farm.recording.errors import ReplayError
from farm.recording.reader import Episode


@dataclass
class ReplayReport:
    """The outcome of a replay; ``reproduced`` is what ``farm replay``'s exit code says."""

    episode_id: str
    env_id: str
    seed: int | None
    target: str  # "in-process" or the endpoint
    steps: list[StepComparison] = field(default_factory=list)
    recorded_steps: int = 0
    complete: bool = True  # the recording had its end record
    problems: list[str] = field(default_factory=list)  # episode-level problems

    @property
    def reproduced(self) -> bool:
        return not self.problems and all(s.ok for s in self.steps)

    @property
    def first_divergence(self) -> int | None:
        return next((s.index for s in self.steps if not s.ok), None)


def action_text(action: Any) -> str:
    """A short human form of a decoded action."""
    if isinstance(action, str):
        return action
    return repr(F.jsonable(action))


class _SyncAdapter:
    """Drive an env through its sync interface, or its async one on a private loop."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self._loop: asyncio.AbstractEventLoop | None = None
        if not callable(getattr(env, "step", None)):
            self._loop = asyncio.new_event_loop()

    def reset(self, **kw: Any) -> Any:
        if self._loop is not None:
            return self._loop.run_until_complete(self.env.areset(**kw))
        return self.env.reset(**kw)

    def step(self, action: Any) -> Any:
        if self._loop is not None:
            return self._loop.run_until_complete(self.env.astep(action))
        return self.env.step(action)

    def close(self) -> None:
        try:
            if self._loop is not None:
                self._loop.run_until_complete(self.env.aclose())
            else:
                self.env.close()
        finally:
            if self._loop is not None:
                self._loop.close()


def make_env(episode: Episode, endpoint: str | None = None) -> Any:
    """A fresh env for ``episode``: the same id and kwargs in-process, or ``endpoint``."""
    if endpoint:
        import farm

        return farm.connect(endpoint)
    from farm.registry import make

    m = episode.meta
    try:
        return make(m.env_id, **(m.env_kwargs or {}))
    except (EnvNotFoundError, MissingExtraError) as e:
        raise ReplayError(
            f"episode {m.episode_id} was recorded from env {m.env_id!r}, which this farm "
            f"cannot make: {e}"
        ) from e


def replay(
    episode: Episode,
    *,
    endpoint: str | None = None,
    tolerance: Tolerance | None = None,
    env: Any = None,
    on_step: Callable[[StepComparison], None] | None = None,
) -> ReplayReport:
    """Re-execute ``episode``'s actions in a fresh env (``env``, ``endpoint`` or made
    in-process) with the recorded seed and options, comparing every step."""
    tol = tolerance or Tolerance()
    m = episode.meta
    if not episode.steps:
        raise ReplayError(f"episode {m.episode_id} has no recorded reset; nothing to replay")
    if m.seed is None:
        raise ReplayError(
            f"episode {m.episode_id} was recorded without a seed; its task cannot be reproduced"
        )
    missing = episode.missing_frames()
    if missing:
        step, h = missing[0]
        raise ReplayError(
            f"episode {m.episode_id} is damaged: {len(missing)} frame file(s) missing, the first "
            f"{F.frame_path(episode.path, h)} (step {step})"
        )
    report = ReplayReport(
        m.episode_id,
        m.env_id,
        m.seed,
        endpoint or "in-process",
        recorded_steps=episode.num_steps,
        complete=episode.complete,
    )
    owned = env is None
    runner = _SyncAdapter(env if env is not None else make_env(episode, endpoint))
    try:
        start = time.perf_counter()
        obs, _info = runner.reset(seed=m.seed, options=m.options)
        rec0 = episode.steps[0]
        cmp = StepComparison(
            0,
            "reset",
            (0.0, 0.0),
            (False, False),
            (False, False),
            duration_s=(rec0.duration_s, time.perf_counter() - start),
        )
        compare_obs(episode.observation(0), obs, tol, cmp)
        _emit(report, cmp, on_step)
        for i in range(1, len(episode.steps)):
            rec = episode.steps[i]
            action = episode.action(i)
            start = time.perf_counter()
            try:
                obs, reward, terminated, truncated, _info = runner.step(action)
            except Exception as e:  # noqa: BLE001 - the env's failure is the replay's finding
                cmp = StepComparison(
                    i,
                    action_text(action),
                    (rec.reward, None),
                    (rec.terminated, None),
                    (rec.truncated, None),
                )
                cmp.problems.append(f"env.step raised {type(e).__name__}: {e}")
                _emit(report, cmp, on_step)
                break
            cmp = StepComparison(
                i,
                action_text(action),
                (rec.reward, float(reward)),
                (rec.terminated, bool(terminated)),
                (rec.truncated, bool(truncated)),
                duration_s=(rec.duration_s, time.perf_counter() - start),
            )
            if abs(rec.reward - float(reward)) > tol.reward_atol:
                cmp.problems.append(f"reward {float(reward):g} != recorded {rec.reward:g}")
            if bool(terminated) != rec.terminated or bool(truncated) != rec.truncated:
                cmp.problems.append(
                    f"terminated/truncated {bool(terminated)}/{bool(truncated)} != recorded "
                    f"{rec.terminated}/{rec.truncated}"
                )
            compare_obs(episode.observation(i), obs, tol, cmp)
            _emit(report, cmp, on_step)
            if (terminated or truncated) and i < len(episode.steps) - 1:
                report.problems.append(
                    f"the replay ended at step {i}; the recording goes on to step "
                    f"{len(episode.steps) - 1}"
                )
                break
    finally:
        if owned:
            with contextlib.suppress(Exception):
                runner.close()
    return report


def _emit(
    report: ReplayReport, cmp: StepComparison, on_step: Callable[[StepComparison], None] | None
) -> None:
    report.steps.append(cmp)
    if on_step is not None:
        on_step(cmp)
