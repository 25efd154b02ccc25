"""The job spec (``farm submit JOB.yaml``), validated strictly: unknown keys, wrong
types and out-of-range values are errors naming their key path, before anything
starts. Example: ``trainer/examples/miniwob.yaml``::

    name: miniwob-6
    run_dir: runs/miniwob-6              # default: a new runs/<name>-<date>-<time>
    sandboxes: {kind: browser, env: miniwob/suite, count: 4}
    tasks:
      train: [click-button, click-link, click-tab, click-checkboxes, enter-text, focus-text]
      infeasible: [click-button-infeasible]
    algorithm: {group_size: 4, redundancy: 1, eta: 4, batch_groups: 4, advantage: stepo}
    budget: {minutes: 20}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainer.errors import JobSpecError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SandboxSpec(_Strict):
    """Where rollouts run. ``source``: ``farm`` leases from the farm `farm up` started
    (``farm``: its control address; default: the default state dir's); ``job`` starts a
    farm for the job (``backend``) and stops it at the end; ``inprocess`` makes the envs
    inside the job's process (toy envs, tests); ``auto`` leases when a farm with this
    kind answers, else starts one for the job."""

    source: Literal["auto", "farm", "job", "inprocess"] = "auto"
    farm: str | None = None
    kind: Literal["toy", "browser", "desktop", "android"] = "browser"
    env: str = "miniwob/suite"
    count: int = Field(default=4, ge=1)
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    backend: Literal["local", "docker", "ray"] = "local"
    lease_timeout_s: float = Field(default=120.0, gt=0)


class PolicySpec(_Strict):
    name: str = "text-pointer"
    kwargs: dict[str, Any] = Field(default_factory=dict)


class OptimizerSpec(_Strict):
    name: Literal["adam", "adamw", "sgd"] = "adam"
    lr: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    max_grad_norm: float = Field(default=1.0, gt=0)


class AlgorithmSpec(_Strict):
    """``group_size`` G, ``redundancy`` r (G + r launched, first G kept), ``eta`` the
    staleness bound (0 = synchronous), ``batch_groups`` B (groups per optimiser step)."""

    group_size: int = Field(default=4, ge=2)
    redundancy: int = Field(default=1, ge=0)
    eta: int = Field(default=4, ge=0)
    batch_groups: int = Field(default=4, ge=1)
    max_running_groups: int | None = Field(default=None, ge=1)
    clip_low: float = Field(default=0.2, gt=0, lt=1)
    clip_high: float = Field(default=0.28, gt=0)
    iw_cap: float = Field(default=5.0, ge=1)
    advantage: Literal["stepo", "grpo", "gigpo"] = "stepo"
    normalize_std: bool = True
    gigpo_omega: float = Field(default=1.0, ge=0)
    gamma: float = Field(default=0.95, gt=0, le=1)
    ppo_epochs: int = Field(default=2, ge=1)
    minibatches: int = Field(default=1, ge=1)
    #: accumulate the minibatches' gradients into one update per epoch (micro-batching for
    #: models whose whole batch does not fit at once) instead of one update each
    grad_accum: bool = False
    entropy_coef: float = Field(default=0.01, ge=0)
    max_steps: int = Field(default=8, ge=1)  # the rollout horizon (steps per episode)
    #: ``same``: a group's G rollouts play one task instance (seed), the GRPO baseline
    #: compares attempts at the same problem; ``distinct``: G instances of the task (a
    #: per-task baseline; groups keep reward variance once the policy is deterministic)
    group_seeds: Literal["same", "distinct"] = "same"
    max_relaunches: int = Field(default=8, ge=0)
    max_nonfinite: int = Field(default=5, ge=1)  # non-finite losses in a row before stopping

    @model_validator(mode="after")
    def _running(self) -> AlgorithmSpec:
        if self.max_running_groups is not None and self.max_running_groups < 1:
            raise ValueError("max_running_groups must be >= 1")
        return self


class EvalSpec(_Strict):
    """Greedy evaluation on held-out seeds ``seed_base + i`` (training seeds are below
    ``seed_base``). ``every_s``: period (0: only at the start and the end)."""

    tasks: list[str] | None = None  # default: tasks.train
    episodes_per_task: int = Field(default=16, ge=1)
    seed_base: int = Field(default=1_000_000_000, ge=1)
    every_s: float = Field(default=120.0, ge=0)
    at_start: bool = True


class TasksSpec(_Strict):
    train: list[str] = Field(min_length=1)
    infeasible: list[str] = Field(default_factory=list)
    eval: EvalSpec = Field(default_factory=EvalSpec)


class CurriculumSpec(_Strict):
    enabled: bool = True  # off: uniform over tasks.train (infeasible share still bounded)
    band: tuple[float, float] = (0.1, 0.9)
    decay: float = Field(default=0.97, gt=0, le=1)
    min_attempts: int = Field(default=8, ge=0)
    replay_share: float = Field(default=0.15, ge=0, le=1)
    replay_per_task: int = Field(default=8, ge=1)
    infeasible_share: float = Field(default=0.1, ge=0, le=1)
    mastered_weight: float = Field(default=0.1, ge=0)
    hard_weight: float = Field(default=0.2, ge=0)
    hard_explore: float = Field(default=0.3, ge=0, le=1)

    @model_validator(mode="after")
    def _band(self) -> CurriculumSpec:
        lo, hi = self.band
        if not 0 <= lo < hi <= 1:
            raise ValueError(f"band must satisfy 0 <= low < high <= 1, got {list(self.band)}")
        return self


class BudgetSpec(_Strict):
    """When the job ends (the first that is reached; at least one must be set)."""

    minutes: float | None = Field(default=None, gt=0)
    learner_steps: int | None = Field(default=None, ge=1)
    samples: int | None = Field(default=None, ge=1)  # trained step samples
    target_success: float | None = Field(default=None, gt=0, le=1)  # mean greedy eval success

    @model_validator(mode="after")
    def _some(self) -> BudgetSpec:
        if self.minutes is None and self.learner_steps is None and self.samples is None:
            raise ValueError("set at least one of minutes, learner_steps, samples")
        return self


class CheckpointSpec(_Strict):
    every_steps: int = Field(default=10, ge=1)
    keep: int = Field(default=2, ge=1)


class JobSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    run_dir: str | None = None
    seed: int = 0
    runtime: Literal["auto", "inprocess", "ray"] = "auto"
    torch_threads: int = Field(default=1, ge=1)
    record: bool = True
    sandboxes: SandboxSpec = Field(default_factory=SandboxSpec)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    tasks: TasksSpec
    curriculum: CurriculumSpec = Field(default_factory=CurriculumSpec)
    budget: BudgetSpec
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)

    @property
    def eval_tasks(self) -> list[str]:
        return list(self.tasks.eval.tasks or self.tasks.train)

    def resolved_run_dir(self) -> Path:
        """``run_dir``, or a new ``runs/<name>-<date>-<time>`` when the spec has none."""
        if self.run_dir:
            return Path(self.run_dir).expanduser()
        import time

        return Path("runs") / f"{self.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse_spec(data: Any, source: str = "job spec") -> JobSpec:
    if not isinstance(data, dict):
        raise JobSpecError(f"{source}: expected a mapping at the top level")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        msgs = []
        for err in e.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            msgs.append(f"{_path(tuple(err['loc']))}: {msg}")
        raise JobSpecError(f"{source}: " + "; ".join(msgs)) from None


def load_spec(path: str | Path) -> JobSpec:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise JobSpecError(f"no job spec at {p}") from None
    except yaml.YAMLError as e:
        raise JobSpecError(f"{p}: not valid YAML: {e}") from None
    return parse_spec(data, str(p))


def dump_spec(spec: JobSpec) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
