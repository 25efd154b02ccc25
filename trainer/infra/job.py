"""A training job: sandboxes, rollouts, the batched actor, the learner, evaluation,
checkpoints and metrics, on one event loop (the learner and the actor compute in
their own threads).

Flow: the admission loop starts a group whenever the staleness controller allows
(:mod:`trainer.algo.staleness`) and the curriculum picks its task
(:mod:`trainer.algo.curriculum`); a group launches ``G + r`` rollouts that queue
for sandboxes; finished groups wait for the learner, which trains on ``B`` whole
groups per step, publishes the new weights to the actor and checkpoints. The job
ends at its budget (``budget``: minutes of training, learner steps, trained
samples, or a target greedy success), with a final evaluation, a checkpoint and
the learning-curve PNG.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import signal
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.algo.curriculum import Curriculum, CurriculumConfig, Pick
from trainer.algo.groups import GroupCollector, Verdict
from trainer.algo.staleness import StalenessController
from trainer.api.spec import JobSpec, dump_spec, load_spec
from trainer.api.types import Group, Trajectory
from trainer.errors import JobSpecError, StalenessError, TrainerError
from trainer.infra import checkpoint
from trainer.infra.actor import BatchedActor
from trainer.infra.metrics import MetricsLog, plot_learning_curve
from trainer.infra.progress import Progress
from trainer.infra.rollout import run_episode
from trainer.infra.sandboxes import SandboxPool
from trainer.infra.tasks import check_tasks
from trainer.policies import make_policy
from trainer.util import require_torch

log = logging.getLogger("farm.trainer")


@dataclass
class JobResult:
    run_dir: Path
    version: int
    stop_reason: str
    train_elapsed_s: float
    evals: list[dict[str, Any]] = field(default_factory=list)
    samples: int = 0
    episodes: int = 0
    learner_utilisation: float = 0.0
    resumed_from: int | None = None

    runtime: str = "inprocess"

    @property
    def final_success(self) -> float | None:
        return self.evals[-1]["success"] if self.evals else None

    def summary(self) -> dict[str, Any]:
        """JSON-able: what ``farm submit`` prints and writes to ``result.json``."""
        return {
            "run_dir": str(self.run_dir),
            "version": self.version,
            "stop_reason": self.stop_reason,
            "train_elapsed_s": self.train_elapsed_s,
            "evals": self.evals,
            "final_success": self.final_success,
            "samples": self.samples,
            "episodes": self.episodes,
            "learner_utilisation": self.learner_utilisation,
            "resumed_from": self.resumed_from,
            "runtime": self.runtime,
        }


@dataclass
class Counters:
    episodes: int = 0
    episodes_success: int = 0
    infra_discarded: int = 0  # rollouts of a group cut by infrastructure and relaunched
    infra_cut: int = 0  # every episode cut by infrastructure (training or evaluation)
    zero_variance_dropped: int = 0
    failed_groups: int = 0
    samples: int = 0
    groups_trained: int = 0
    learner_busy_s: float = 0.0
    learner_idle_s: float = 0.0
    staleness: Counter[int] = field(default_factory=Counter)
    sync_s: float = 0.0

    def state(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["staleness"] = dict(self.staleness)
        return d

    def load(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            if k == "staleness":
                self.staleness = Counter({int(a): int(b) for a, b in v.items()})
            elif hasattr(self, k):
                setattr(self, k, v)


def default_max_running(spec: JobSpec) -> int:
    a = spec.algorithm
    per_group = a.group_size + a.redundancy
    return max(2, 2 * math.ceil(spec.sandboxes.count / per_group))


class Job:
    """Run with :meth:`run` (blocking) or ``await job.arun()``."""

    def __init__(
        self,
        spec: JobSpec,
        *,
        run_dir: str | Path | None = None,
        resume: bool = False,
        progress: bool = True,
    ) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir) if run_dir is not None else spec.resolved_run_dir()
        self.resume = resume
        self.show_progress = progress
        a = spec.algorithm
        check_tasks(spec)
        self.torch = require_torch()
        self.torch.set_num_threads(spec.torch_threads)
        kwargs = dict(spec.policy.kwargs)
        kwargs.setdefault("seed", spec.seed)
        self.learner_policy = make_policy(spec.policy.name, role="learner", **kwargs)
        self.actor_policy = make_policy(spec.policy.name, role="actor", **kwargs)
        self.actor_policy.set_weights(self.learner_policy.get_weights(), 0)
        from trainer.infra.learner import Learner

        self.learner = Learner(self.learner_policy, spec.optimizer, a)
        self.controller: StalenessController[Group] = StalenessController(
            eta=a.eta,
            batch_groups=a.batch_groups,
            max_running=a.max_running_groups or default_max_running(spec),
        )
        c = spec.curriculum
        self.curriculum = Curriculum(
            list(spec.tasks.train),
            list(spec.tasks.infeasible),
            CurriculumConfig(
                **c.model_dump(exclude={"enabled"}),
                seed_range=(0, spec.tasks.eval.seed_base),
                uniform=not c.enabled,
            ),
            seed=spec.seed,
        )
        self.counters = Counters()
        self.evals: list[dict[str, Any]] = []
        self.recent: deque[bool] = deque(maxlen=200)
        self.episode_times: deque[float] = deque(maxlen=400)
        self.env_times: deque[tuple[float, float]] = deque(maxlen=400)
        self.elapsed_offset = 0.0
        self.resumed_from: int | None = None
        self.stop_reason: str | None = None
        self._next_gid = 0
        self._cond: asyncio.Condition | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._error: BaseException | None = None
        self._t0 = 0.0
        self._last_eval_t = 0.0
        self._abandon_all = False
        self._learner_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm-learner")
        self.pool: SandboxPool | None = None
        self.metrics: MetricsLog | None = None
        self.progress: Progress | None = None

    # ================================================================== setup

    def _prepare_run_dir(self) -> None:
        spec_file = self.run_dir / "job.yaml"
        if self.resume:
            if not spec_file.exists():
                raise JobSpecError(f"--resume {self.run_dir}: no job.yaml there (not a run dir)")
            saved = load_spec(spec_file)
            if saved.model_dump(exclude={"budget", "run_dir"}) != self.spec.model_dump(
                exclude={"budget", "run_dir"}
            ):
                raise JobSpecError(
                    f"--resume {self.run_dir}: the job spec differs from the one the run started "
                    "with (only budget may change on resume)"
                )
            return
        ckpt_dir = self.run_dir / "checkpoints"
        if ckpt_dir.exists() and any(ckpt_dir.iterdir()):
            raise JobSpecError(
                f"run_dir {self.run_dir} already holds a run; resume it with "
                f"`farm submit --resume {self.run_dir}` or choose another run_dir"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(dump_spec(self.spec))

    def _restore(self) -> None:
        path = checkpoint.latest(self.run_dir)
        if path is None:
            log.warning("no checkpoint in %s yet: starting from scratch", self.run_dir)
            return
        state = checkpoint.load(path)
        self.learner.load_state(state["learner"])
        self.actor_policy.set_weights(
            self.learner_policy.get_weights(), self.learner_policy.version
        )
        self.controller.load_state(state["staleness"])
        self.curriculum.load_state(state["curriculum"])
        self.counters.load(state["counters"])
        self.evals = list(state["evals"])
        self.recent.extend(state.get("recent", []))
        self.elapsed_offset = float(state["elapsed_s"])
        self._next_gid = int(state["next_gid"])
        random.setstate(state["py_rng"])
        self.torch.set_rng_state(state["torch_rng"])
        self.resumed_from = self.learner_policy.version
        log.info("resumed %s at policy version %d", self.run_dir, self.resumed_from)

    def _checkpoint(self) -> None:
        if not self.learner.weights_finite():
            log.error("weights are not finite: checkpoint skipped (the last one stays valid)")
            return
        state = {
            "learner": self.learner.state(),
            "staleness": self.controller.state(),
            "curriculum": self.curriculum.state(),
            "counters": self.counters.state(),
            "evals": self.evals,
            "recent": list(self.recent),
            "elapsed_s": self.elapsed,
            "next_gid": self._next_gid,
            "py_rng": random.getstate(),
            "torch_rng": self.torch.get_rng_state(),
        }
        checkpoint.save(self.run_dir, self.learner_policy.version, state, self.spec.checkpoint.keep)

    # ================================================================== helpers

    @property
    def elapsed(self) -> float:
        """Seconds of training (sandboxes ready to now), over all resumptions."""
        return self.elapsed_offset + (time.monotonic() - self._t0 if self._t0 else 0.0)

    async def _notify(self) -> None:
        assert self._cond is not None
        async with self._cond:
            self._cond.notify_all()

    async def _until(self, pred: Any) -> None:
        assert self._cond is not None
        async with self._cond:
            await self._cond.wait_for(lambda: pred() or self.stop_reason is not None)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and self._error is None:
            self._error = exc
            self.stop(f"error: {type(exc).__name__}: {exc}")

    def stop(self, reason: str) -> None:
        """End the job (keeps the first reason)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            if self._cond is not None:
                asyncio.get_running_loop().create_task(self._notify())

    def _budget_reached(self) -> str | None:
        b = self.spec.budget
        if b.learner_steps is not None and self.learner_policy.version >= b.learner_steps:
            return f"budget: {b.learner_steps} learner steps"
        if b.samples is not None and self.counters.samples >= b.samples:
            return f"budget: {b.samples} samples"
        if b.minutes is not None and self.elapsed >= b.minutes * 60:
            return f"budget: {b.minutes:g} minutes"
        reached = self.evals and self.evals[-1]["success"] >= (b.target_success or 2.0)
        if b.target_success is not None and reached:
            return f"target: greedy success {self.evals[-1]['success']:.2f}"
        return None

    # ================================================================== rollouts

    async def _admission(self) -> None:
        while self.stop_reason is None:
            await self._until(self.controller.can_admit)
            if self.stop_reason is not None:
                return
            pick = self.curriculum.next_group()
            gid = self._next_gid
            self._next_gid += 1
            version = self.controller.admit(gid)
            self._spawn(self._group(gid, pick, version), f"group-{gid}")

    async def _group(self, gid: int, pick: Pick, version: int) -> None:
        a = self.spec.algorithm
        group = Group(gid, pick.task, pick.seed, version, stream=pick.stream)
        coll = GroupCollector(group, a.group_size, a.redundancy, a.max_relaunches)
        if pick.replay is not None:
            coll.add_replay(_as_replay(pick.replay))
        pending = {self._launch(coll, pick) for _ in range(coll.launches())}
        while pending and not coll.decided and self.stop_reason is None:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                traj = task.result()
                if traj is None or coll.decided:
                    continue
                verdict = coll.on_finished(traj)
                if verdict is Verdict.RELAUNCH:
                    self.counters.infra_discarded += 1
                    pending.add(self._launch(coll, pick))
                elif verdict is Verdict.COMPLETE:
                    group.completed_s = time.monotonic()
                    self.controller.finish(gid, group)
                elif verdict is Verdict.ZERO_VARIANCE:
                    self.counters.zero_variance_dropped += 1
                    self.controller.drop(gid)
                elif verdict is Verdict.FAILED:
                    self.counters.failed_groups += 1
                    self.controller.drop(gid)
        if not coll.decided:  # the job is stopping
            coll.decided = True
            self.controller.drop(gid)
        await self._notify()

    def _launch(self, coll: GroupCollector, pick: Pick) -> asyncio.Task[Trajectory | None]:
        seed = pick.seed
        if self.spec.algorithm.group_seeds == "distinct" and pick.replay is None:
            seed = self.curriculum.rng.randrange(*self.curriculum.cfg.seed_range)
        return self._spawn(self._rollout(coll, pick, seed), f"rollout-{coll.group.gid}")

    async def _rollout(self, coll: GroupCollector, pick: Pick, seed: int) -> Trajectory | None:
        assert self.pool is not None
        sb = await self.pool.acquire(prefer=pick.task)
        traj: Trajectory | None = None
        try:
            if coll.decided or self.stop_reason is not None:
                return None
            traj = await run_episode(
                sb,
                self.actor,
                task=pick.task,
                seed=seed,
                feasible=pick.feasible,
                max_steps=self.spec.algorithm.max_steps,
                explore=pick.explore,
                abandon=lambda: coll.decided or self._abandon_all,
                annotations={"group": coll.group.gid, "stream": pick.stream},
            )
        finally:
            self.pool.release(sb, broken=traj.infra_error if traj is not None else None)
        self.counters.infra_cut += traj.infra_error is not None
        if traj.infra_error is None and not (
            traj.truncated and (coll.decided or self._abandon_all)
        ):
            self.counters.episodes += 1
            self.counters.episodes_success += traj.success
            if pick.stream != "infeasible":
                self.recent.append(traj.success)
            self.episode_times.append(time.monotonic())
            self.env_times.append((traj.reset_s, traj.step_s / max(1, len(traj))))
            self.curriculum.update(traj)
        return traj

    # ================================================================== learner

    async def _learner(self) -> None:
        loop = asyncio.get_running_loop()
        while self.stop_reason is None:
            waited = time.monotonic()
            await self._until(self.controller.batch_ready)
            if self.stop_reason is not None:
                return
            self.counters.learner_idle_s += time.monotonic() - waited
            step = self.controller.next_step
            groups = self.controller.take_batch()
            stale = [g.staleness(step) for g in groups]
            if max(stale) > self.spec.algorithm.eta:
                raise StalenessError(f"staleness {max(stale)} > eta at step {step}")
            for s in stale:
                self.counters.staleness[s] += 1
            started = time.monotonic()
            stats = await loop.run_in_executor(
                self._learner_thread, self.learner.train_step, groups
            )
            weights = await loop.run_in_executor(
                self._learner_thread, self.learner_policy.get_weights
            )
            self.counters.learner_busy_s += time.monotonic() - started
            version = self.learner_policy.version
            sync_s = await self.actor.set_weights(weights, version)
            self.counters.sync_s += sync_s
            self.controller.publish(version)
            self.counters.samples += int(stats["samples"])
            self.counters.groups_trained += len(groups)
            await self._notify()
            self._log_train(step, stats, stale, sync_s)
            if version % self.spec.checkpoint.every_steps == 0:
                await loop.run_in_executor(self._learner_thread, self._checkpoint)
            reason = self._budget_reached()
            if reason is not None:
                self.stop(reason)

    def learner_utilisation(self) -> float:
        c = self.counters
        total = c.learner_busy_s + c.learner_idle_s
        return c.learner_busy_s / total if total > 0 else 0.0

    def episodes_per_s(self) -> float:
        t = self.episode_times
        if len(t) < 2 or t[-1] <= t[0]:
            return 0.0
        return (len(t) - 1) / (time.monotonic() - t[0])

    def train_success(self) -> float | None:
        return sum(self.recent) / len(self.recent) if self.recent else None

    def _log_train(self, step: int, stats: dict[str, Any], stale: list[int], sync_s: float) -> None:
        assert self.metrics is not None
        c = self.counters
        data = {
            **stats,
            "version": self.learner_policy.version,
            "elapsed_s": self.elapsed,
            "staleness_mean": sum(stale) / len(stale),
            "staleness_max": max(stale),
            "staleness_hist": {str(k): v for k, v in sorted(c.staleness.items())},
            "learner_utilisation": self.learner_utilisation(),
            "learner_idle_s": c.learner_idle_s,
            "learner_busy_s": c.learner_busy_s,
            "weight_sync_s": sync_s,
            "episodes": c.episodes,
            "episodes_per_s": self.episodes_per_s(),
            "train_success": self.train_success(),
            "samples_total": c.samples,
            "zero_variance_dropped": c.zero_variance_dropped,
            "infra_discarded": c.infra_discarded,
            "infra_cut": c.infra_cut,
            "sandboxes_replaced": self.pool.replaced if self.pool is not None else 0,
            "actor_mean_batch": self.actor.stats.mean_batch,
            "env_reset_s_mean": _mean([r for r, _ in self.env_times]),
            "env_step_s_mean": _mean([s for _, s in self.env_times]),
            "groups_running": self.controller.running,
            "groups_ready": self.controller.ready,
            "curriculum": self.curriculum.snapshot(),
        }
        self.metrics.write("train", self.learner_policy.version, data)

    # ================================================================== evaluation

    async def evaluate(self, label: str) -> dict[str, Any]:
        """Greedy episodes on held-out seeds of every eval task (and infeasible task)."""
        ev = self.spec.tasks.eval
        version = self.actor.version
        jobs = []
        for task in [*self.spec.eval_tasks, *self.spec.tasks.infeasible]:
            for i in range(ev.episodes_per_task):
                jobs.append((task, ev.seed_base + i, task not in self.spec.tasks.infeasible))
        started = time.monotonic()
        results = await asyncio.gather(*(self._eval_episode(*j) for j in jobs))
        per_task: dict[str, list[bool]] = {}
        for (task, _, _), ok in zip(jobs, results, strict=True):
            if ok is not None:
                per_task.setdefault(task, []).append(ok)
        rates = {t: sum(v) / len(v) for t, v in per_task.items()}
        feasible = [rates[t] for t in self.spec.eval_tasks if t in rates]
        record = {
            "label": label,
            "version": version,
            "elapsed_s": self.elapsed,
            "success": sum(feasible) / len(feasible) if feasible else 0.0,
            "per_task": {t: rates[t] for t in self.spec.eval_tasks if t in rates},
            "infeasible": {t: rates[t] for t in self.spec.tasks.infeasible if t in rates},
            "episodes": sum(len(v) for v in per_task.values()),
            "eval_s": time.monotonic() - started,
        }
        self.evals.append(record)
        if self.metrics is not None:
            self.metrics.write("eval", version, record)
        if self.progress is not None:
            self.progress.note(
                f"eval ({label}) at version {version}: greedy success {record['success']:.2f}"
            )
        return record

    async def _eval_episode(self, task: str, seed: int, feasible: bool) -> bool | None:
        assert self.pool is not None
        for _ in range(3):
            sb = await self.pool.acquire(prefer=task)
            traj = None
            try:
                traj = await run_episode(
                    sb,
                    self.actor,
                    task=task,
                    seed=seed,
                    feasible=feasible,
                    max_steps=self.spec.algorithm.max_steps,
                    greedy=True,
                    annotations={"eval": True},
                )
            finally:
                self.pool.release(sb, broken=traj.infra_error if traj is not None else None)
            if traj.infra_error is None:
                return traj.success
            self.counters.infra_cut += 1
        return None

    async def _evaluator(self) -> None:
        every = self.spec.tasks.eval.every_s
        if not every:
            return
        while self.stop_reason is None:
            await asyncio.sleep(1.0)
            if time.monotonic() - self._last_eval_t >= every:
                await self.evaluate("periodic")
                self._last_eval_t = time.monotonic()
                reason = self._budget_reached()
                if reason is not None:
                    self.stop(reason)

    async def _budget_watch(self) -> None:
        while self.stop_reason is None:
            await asyncio.sleep(0.5)
            b = self.spec.budget
            if b.minutes is not None and self.elapsed >= b.minutes * 60:
                self.stop(f"budget: {b.minutes:g} minutes")

    # ================================================================== run

    def run(self) -> JobResult:
        return asyncio.run(self.arun())

    async def arun(self) -> JobResult:
        self._prepare_run_dir()
        self._cond = asyncio.Condition()
        if self.resume:
            self._restore()
        self.metrics = MetricsLog(self.run_dir)
        self.progress = Progress(self, enabled=self.show_progress)
        record_dir = str(self.run_dir / "episodes") if self.spec.record else None
        self.pool = SandboxPool(self.spec.sandboxes, job=self.spec.name, record_dir=record_dir)
        self.actor = BatchedActor(self.actor_policy)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop, f"signal {sig.name}")
        try:
            with self.progress.starting(
                f"starting {self.spec.sandboxes.count} {self.spec.sandboxes.env} sandboxes"
            ):
                await self.pool.start()
            self.progress.note(
                f"{self.pool.size} sandboxes ({self.pool.source}"
                + (f" at {self.pool.address}" if self.pool.address else "")
                + ")"
            )
            self.actor.start()
            self._t0 = time.monotonic()
            if self.spec.tasks.eval.at_start and not self.evals:
                await self.evaluate("start")
            self._last_eval_t = time.monotonic()
            with self.progress.live():
                self._spawn(self._admission(), "admission")
                self._spawn(self._learner(), "learner")
                self._spawn(self._evaluator(), "evaluator")
                self._spawn(self._budget_watch(), "budget")
                await self._until(lambda: False)  # returns once stop_reason is set
                await self._wind_down()
            if self._error is None:
                await self.evaluate("final")
                await loop.run_in_executor(self._learner_thread, self._checkpoint)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
            await self._close()
        if self._error is not None:
            raise self._error
        return JobResult(
            run_dir=self.run_dir,
            version=self.learner_policy.version,
            stop_reason=self.stop_reason or "",
            train_elapsed_s=self.elapsed,
            evals=self.evals,
            samples=self.counters.samples,
            episodes=self.counters.episodes,
            learner_utilisation=self.learner_utilisation(),
            resumed_from=self.resumed_from,
        )

    def run_eval(self) -> dict[str, Any]:
        """Only evaluate the policy as the spec stands (no training, no run dir changes
        beyond ``metrics.jsonl``): start the sandboxes, play the held-out episodes, stop."""
        return asyncio.run(self.aevaluate_only())

    async def aevaluate_only(self) -> dict[str, Any]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._cond = asyncio.Condition()
        self.metrics = MetricsLog(self.run_dir, tensorboard=False)
        self.progress = Progress(self, enabled=self.show_progress)
        self.pool = SandboxPool(self.spec.sandboxes, job=self.spec.name, record_dir=None)
        self.actor = BatchedActor(self.actor_policy)
        try:
            with self.progress.starting(f"starting {self.spec.sandboxes.count} sandboxes"):
                await self.pool.start()
            self.actor.start()
            self._t0 = time.monotonic()
            return await self.evaluate("only")
        finally:
            await self.actor.close()
            await self.pool.close()
            self.metrics.close()
            self.metrics = None
            self._learner_thread.shutdown(wait=False)

    async def _wind_down(self) -> None:
        """Stop admitting, let the learner finish its step, abandon rollouts at their next
        step boundary and wait for them (the sandboxes come back)."""
        self._abandon_all = True
        await self._notify()
        deadline = time.monotonic() + 60
        while self._tasks and time.monotonic() < deadline:
            await asyncio.wait(set(self._tasks), timeout=max(0.1, deadline - time.monotonic()))
        for task in list(self._tasks):
            task.cancel()
        self._abandon_all = False

    async def _close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if getattr(self, "actor", None) is not None:
            await self.actor.close()
        if self.pool is not None:
            await self.pool.close()
        self._learner_thread.shutdown(wait=True)
        if self.metrics is not None:
            self.metrics.close()
            with contextlib.suppress(Exception):
                a = self.spec.algorithm
                plot_learning_curve(self.run_dir, f"{self.spec.name} ({a.advantage}, eta={a.eta})")


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _as_replay(traj: Trajectory) -> Trajectory:
    copy = Trajectory(**{**traj.__dict__})
    copy.replay = True
    return copy


def run_job(spec: JobSpec, **kwargs: Any) -> JobResult:
    return Job(spec, **kwargs).run()


__all__ = ["Job", "JobResult", "TrainerError", "run_job"]
