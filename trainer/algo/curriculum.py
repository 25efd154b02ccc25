"""DTAC: a dynamic tri-adaptive curriculum over a task suite.

Per task, a pass-rate estimate from exponentially decayed counts (fresh
trajectories only)::

    s <- decay * s + success,   n <- decay * n + 1,   p = (s + 1) / (n + 2)

Each new group draws its task from three streams:

1. **infeasible** (controlled exposure): chosen with probability
   ``q = infeasible_share * max(0.25, 1 - p_infeasible)`` (less once the policy
   answers ``fail()`` reliably), and only while the realised share stays within
   the bound: after the pick, ``n_infeasible <= infeasible_share * n_groups``.
2. **replay** (difficult positives): with probability ``replay_share``, a hard
   task (``p < band[0]`` after ``min_attempts``) that has a stored success; the
   group plays the stored episode's seed and the success is replayed into it as
   one of its G members, so the rare positive keeps its weight.
3. **learnable** and the rest: tasks sampled with weight ``p (1 - p)`` (the
   reward variance of a group, floored at ``0.01``) for tasks inside the band
   (or not yet tried ``min_attempts`` times), ``mastered_weight * 0.25`` for tasks
   above it and ``hard_weight * 0.25`` for tasks below it: tasks leave the
   learnable band as they are mastered or proven hopeless, but are revisited.
   Groups of hard tasks (and of infeasible tasks the policy keeps getting wrong)
   act with an exploration mixture ``(1 - hard_explore) * pi
   + hard_explore * uniform`` (the behaviour log-probability is the mixture's, so
   the loss's importance weights correct for it): a policy that has collapsed onto
   a harmless wrong action on a hard task otherwise never finds its first success,
   since all-failure groups carry no signal and are dropped.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from trainer.api.types import Trajectory


@dataclass(frozen=True)
class CurriculumConfig:
    band: tuple[float, float] = (0.1, 0.9)
    decay: float = 0.97
    min_attempts: int = 8
    replay_share: float = 0.15
    replay_per_task: int = 8
    infeasible_share: float = 0.1
    mastered_weight: float = 0.1
    hard_weight: float = 0.2
    seed_range: tuple[int, int] = (0, 1_000_000_000)  # training seeds; eval seeds lie outside
    hard_explore: float = 0.3  # exploration mixture for groups of hard tasks (module doc)
    #: off switch: feasible tasks uniformly, no replay (the infeasible share stays bounded)
    uniform: bool = False


@dataclass
class TaskStats:
    s: float = 0.0
    n: float = 0.0
    attempts: int = 0

    @property
    def p(self) -> float:
        return (self.s + 1.0) / (self.n + 2.0)


@dataclass
class Pick:
    """The curriculum's choice for a new group."""

    task: str
    seed: int
    stream: str  # learnable | mastered | hard | replay | infeasible
    feasible: bool = True
    replay: Trajectory | None = None
    explore: float = 0.0  # eps of the behaviour mixture (1 - eps) pi + eps uniform


@dataclass
class Curriculum:
    tasks: list[str]
    infeasible: list[str] = field(default_factory=list)
    cfg: CurriculumConfig = field(default_factory=CurriculumConfig)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("the curriculum needs at least one feasible task")
        self.rng = random.Random(self.seed)
        self.stats: dict[str, TaskStats] = {t: TaskStats() for t in [*self.tasks, *self.infeasible]}
        self.successes: dict[str, deque[Trajectory]] = {
            t: deque(maxlen=self.cfg.replay_per_task) for t in self.tasks
        }
        self.n_groups = 0
        self.n_infeasible = 0
        self.stream_counts: dict[str, int] = {}

    # ---------------------------------------------------------------- estimates

    def pass_rate(self, task: str) -> float:
        return self.stats[task].p

    def band_of(self, task: str) -> str:
        st = self.stats[task]
        lo, hi = self.cfg.band
        if st.attempts < self.cfg.min_attempts or lo <= st.p <= hi:
            return "learnable"
        return "mastered" if st.p > hi else "hard"

    def update(self, traj: Trajectory) -> None:
        """Account a fresh (not replayed, not infrastructure-cut) trajectory."""
        if traj.replay or traj.infra_error is not None or traj.task not in self.stats:
            return
        st = self.stats[traj.task]
        st.s = self.cfg.decay * st.s + float(traj.success)
        st.n = self.cfg.decay * st.n + 1.0
        st.attempts += 1
        if traj.success and traj.feasible and traj.task in self.successes:
            self.successes[traj.task].append(traj)

    # ---------------------------------------------------------------- sampling

    def _infeasible_prob(self) -> float:
        if not self.infeasible:
            return 0.0
        p = sum(self.stats[t].p for t in self.infeasible) / len(self.infeasible)
        return self.cfg.infeasible_share * max(0.25, 1.0 - p)

    def next_group(self) -> Pick:
        pick = self._choose()
        self.n_groups += 1
        self.n_infeasible += pick.stream == "infeasible"
        self.stream_counts[pick.stream] = self.stream_counts.get(pick.stream, 0) + 1
        return pick

    def _seed(self) -> int:
        return self.rng.randrange(*self.cfg.seed_range)

    def _choose(self) -> Pick:
        r = self.rng.random()
        within = self.n_infeasible + 1 <= self.cfg.infeasible_share * (self.n_groups + 1) + 1e-9
        if within and r < self._infeasible_prob():
            task = self.rng.choice(self.infeasible)
            st = self.stats[task]
            lost = st.attempts >= self.cfg.min_attempts and st.p < self.cfg.band[0]
            explore = self.cfg.hard_explore if lost else 0.0
            return Pick(task, self._seed(), "infeasible", False, explore=explore)
        if self.cfg.uniform:
            return Pick(self.rng.choice(self.tasks), self._seed(), "uniform", True)
        hard = [t for t in self.tasks if self.band_of(t) == "hard" and self.successes[t]]
        if hard and self.rng.random() < self.cfg.replay_share:
            task = self.rng.choice(hard)
            traj = self.rng.choice(list(self.successes[task]))
            return Pick(task, traj.seed, "replay", True, traj)
        weights, bands = [], []
        for t in self.tasks:
            band = self.band_of(t)
            p = self.stats[t].p
            if band == "learnable":
                w = max(p * (1.0 - p), 0.01)
            elif band == "mastered":
                w = self.cfg.mastered_weight * 0.25
            else:
                w = self.cfg.hard_weight * 0.25
            weights.append(w)
            bands.append(band)
        i = self.rng.choices(range(len(self.tasks)), weights=weights)[0]
        explore = self.cfg.hard_explore if bands[i] == "hard" else 0.0
        return Pick(self.tasks[i], self._seed(), bands[i], True, explore=explore)

    # ---------------------------------------------------------------- logging, checkpoints

    def snapshot(self) -> dict[str, Any]:
        """Per-task estimates and the stream mix so far (for the logs)."""
        total = max(1, self.n_groups)
        return {
            "pass_rate": {t: round(st.p, 4) for t, st in self.stats.items()},
            "band": {t: self.band_of(t) for t in self.tasks},
            "mix": {k: v / total for k, v in sorted(self.stream_counts.items())},
            "infeasible_share": self.n_infeasible / total,
            "groups": self.n_groups,
        }

    def state(self) -> dict[str, Any]:
        return {
            "stats": {t: [st.s, st.n, st.attempts] for t, st in self.stats.items()},
            "successes": {t: list(q) for t, q in self.successes.items()},
            "n_groups": self.n_groups,
            "n_infeasible": self.n_infeasible,
            "stream_counts": dict(self.stream_counts),
            "rng": self.rng.getstate(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        for t, (s, n, a) in state["stats"].items():
            if t in self.stats:
                self.stats[t] = TaskStats(float(s), float(n), int(a))
        for t, trajs in state["successes"].items():
            if t in self.successes:
                self.successes[t].extend(trajs)
        self.n_groups = int(state["n_groups"])
        self.n_infeasible = int(state["n_infeasible"])
        self.stream_counts = dict(state["stream_counts"])
        self.rng.setstate(state["rng"])
