"""One episode on one sandbox: observe, act through the batched actor, step, and
record; every step keeps the behaviour log-probability and the policy version
that produced it.

An episode cut by infrastructure (the sandbox went away, a timeout, the env
raised) comes back with ``infra_error`` set: it is never trained on as a failure.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from farm.env import TRUNCATED_REASON
from farm.errors import FarmError, InvalidArgumentError
from trainer.api.types import Step, Trajectory
from trainer.errors import PolicyError
from trainer.infra.actor import BatchedActor
from trainer.infra.sandboxes import Sandbox

log = logging.getLogger("farm.trainer.rollout")


def anchor_of(obs: Any) -> str:
    """A hash of what the agent sees in text (GiGPO anchor states)."""
    if isinstance(obs, dict):
        text = f"{obs.get('instruction', '')}\x00{obs.get('text', '')}"
    else:
        text = repr(obs)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


async def run_episode(
    sb: Sandbox,
    actor: BatchedActor,
    *,
    task: str,
    seed: int,
    feasible: bool,
    max_steps: int,
    greedy: bool = False,
    explore: float = 0.0,
    step_timeout_s: float = 120.0,
    abandon: Callable[[], bool] | None = None,
    annotations: dict[str, Any] | None = None,
) -> Trajectory:
    """Play one episode of ``task`` (instance ``seed``) on ``sb``."""
    traj = Trajectory(task=task, seed=seed, feasible=feasible, sandbox=sb.name)
    traj.started_s = time.monotonic()
    rec = sb.recorder
    try:
        t0 = time.perf_counter()
        options = {"task": task}
        obs, info = await asyncio.wait_for(sb.reset(seed, options), step_timeout_s)
        traj.reset_s = time.perf_counter() - t0
        sb.meta["task"] = task
        if rec is not None:
            extra = rec.on_reset(seed, options, obs, info, time.perf_counter() - t0)
            traj.episode_id = extra.get("farm.recording.episode")
        sb.episodes += 1
        history: list[tuple[str, str | None]] = []
        while len(traj.steps) < max_steps:
            if abandon is not None and abandon():
                traj.truncated = True
                break
            try:
                seen = {**obs, "farm.history": tuple(history)} if isinstance(obs, dict) else obs
                out = await actor.act(seen, greedy=greedy, explore=explore)
            except Exception as e:
                raise PolicyError(f"the policy failed to act: {type(e).__name__}: {e}") from e
            anchor = anchor_of(obs)
            if rec is not None:
                rec.annotate_next(
                    policy_version=out.version, logprob=out.logprob, **(annotations or {})
                )
            t0 = time.perf_counter()
            try:
                obs, reward, terminated, truncated, info = await asyncio.wait_for(
                    sb.step(out.action), step_timeout_s
                )
            except InvalidArgumentError as e:
                # the action is not in the env's action space: the policy's fault, not the
                # sandbox's (its session lives on); a no-op step, as for malformed actions
                reward, terminated, truncated, info = 0.0, False, False, {"action_error": str(e)}
            traj.step_s += time.perf_counter() - t0
            history.append((out.action, info.get("action_error")))
            cut = len(traj.steps) + 1 >= max_steps
            if rec is not None:
                rec.on_step(
                    out.action,
                    obs,
                    reward,
                    terminated,
                    truncated or cut,
                    info,
                    time.perf_counter() - t0,
                )
            traj.steps.append(
                Step(
                    out.context,
                    out.choice,
                    out.action,
                    out.logprob,
                    out.version,
                    float(reward),
                    anchor,
                    out.policy_logprob,
                )
            )
            if TRUNCATED_REASON in info:
                traj.infra_error = str(info[TRUNCATED_REASON])
                break
            if terminated or truncated:
                traj.terminated, traj.truncated = bool(terminated), bool(truncated)
                break
        else:
            traj.truncated = True
    except PolicyError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the sandbox did, the episode is cut
        traj.infra_error = f"{type(e).__name__}: {e}"
        if not isinstance(e, (FarmError, TimeoutError, OSError)):
            log.warning("episode of %s on %s failed: %r", task, sb.name, e)
    traj.ended_s = time.monotonic()
    return traj
