"""The task spec format shared by every suite (browser, desktop, Android).

A task is data: which sandbox kind runs it, how to set it up, how to evaluate
it, how long it may take, and whether it can be done at all. Infeasible tasks
ask for something the sandbox does not offer; the correct answer is ``fail()``
(reward 1), anything else earns 0.

The suites of checked tasks (desktop, Android) pair each spec with its logic,
a :class:`TaskLogic` (set up real state, check it at ``done()``), in a
:class:`CheckedSuite`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from farm.errors import ConfigError, FarmError, InvalidArgumentError
from farm.registry import register

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class TaskSpec:
    """One task of a suite.

    Attributes:
        id: env id, ``<suite>/<name>`` (``miniwob/click-button``).
        kind: sandbox kind: ``"browser"``, ``"desktop"``, ``"android"``, or ``"toy"``
            (pure-Python stand-ins such as ``toy/gui``).
        setup: adapter-specific setup (page to open, files to create, app to launch).
        evaluator: adapter-specific evaluator name and arguments.
        max_steps: the episode is truncated after this many steps.
        feasible: False for tasks whose correct answer is ``fail()``.
        instruction: fixed instruction, or None when the task generates it.
        description: one line for ``farm envs``.
    """

    id: str
    kind: str
    setup: dict[str, Any] = field(default_factory=dict)
    evaluator: dict[str, Any] = field(default_factory=dict)
    max_steps: int = 30
    feasible: bool = True
    instruction: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if "/" not in self.id:
            raise ValueError(f"task ids have the form <suite>/<name>, got {self.id!r}")
        if self.kind not in ("browser", "desktop", "android", "toy"):
            raise ValueError(f"unknown sandbox kind {self.kind!r}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")

    @property
    def suite(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.id.split("/", 1)[1]


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """``"; did you mean a, b?"`` for close matches of ``name`` in ``known``, else ``""``."""
    close = difflib.get_close_matches(name, list(known), n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


def choose_task(
    options: Mapping[str, Any] | None,
    *,
    suite: str,
    served: Sequence[str],
    known: Sequence[str],
    default: str,
) -> str:
    """The task a suite env (``suite``, serving ``served`` of the ``known`` task names)
    runs for reset ``options``: ``options["task"]`` (a name, or ``<suite>/name``),
    else ``default``. :class:`InvalidArgumentError` names what is wrong."""
    requested = (options or {}).get("task")
    if requested is None:
        return default
    if not isinstance(requested, str):
        raise InvalidArgumentError(
            f"options['task'] must be a task name (a string), got {requested!r}"
        )
    name = requested.removeprefix(f"{suite}/").removeprefix(f"{suite.split('/')[0]}/")
    if name in served:
        return name
    if name in known:
        raise InvalidArgumentError(
            f"task {requested!r} is not one of the {len(served)} tasks this {suite} env serves "
            f"(its 'tasks' kwarg; see metadata['farm.tasks'])"
        )
    raise InvalidArgumentError(
        f"no {suite} task {requested!r}{did_you_mean(name, served)}; this env serves "
        f"{len(served)} tasks (metadata['farm.tasks'])"
    )


# ---------------------------------------------------------------- checked suites

Ctx = TypeVar("Ctx")
L = TypeVar("L", bound="TaskLogic[Any]")


class CheckerError(FarmError):
    """A task's setup or checker could not read or make the state it needs, or raised:
    the episode ends truncated with this reason (not scored)."""


class TaskLogic(Generic[Ctx]):
    """What an episode means in a sandbox: set up state, give the instruction, check.

    Subclasses override :meth:`setup` (seed state through the sandbox's context
    ``Ctx``, start apps; return the instruction) and :meth:`check` (read real
    state; return reward and info).
    """

    def setup(self, ctx: Ctx, rng: np.random.Generator) -> str:
        raise NotImplementedError

    def check(self, ctx: Ctx) -> tuple[float, dict[str, Any]]:
        raise NotImplementedError


@dataclass(frozen=True)
class SuiteEntry(Generic[L]):
    """One task of a :class:`CheckedSuite`: its logic and what its spec says
    (``max_steps``: None for the suite's default)."""

    logic: type[L]
    apps: tuple[str, ...]
    checker: str
    description: str
    max_steps: int | None = None
    feasible: bool = True
    setup: dict[str, Any] = field(default_factory=dict)


class CheckedSuite(Generic[L]):
    """The tasks ``<kind>/<name>`` of a sandbox kind: their specs (``setup``: the task's
    name, its apps and the entry's setup; ``evaluator``: the checker) and logic."""

    def __init__(self, kind: str, entries: Mapping[str, SuiteEntry[L]], *, max_steps: int) -> None:
        self.kind, self.entries = kind, entries
        self.specs: dict[str, TaskSpec] = {
            f"{kind}/{name}": TaskSpec(
                id=f"{kind}/{name}",
                kind=kind,
                setup={"task": name, "apps": list(e.apps), **e.setup},
                evaluator={"name": e.checker},
                max_steps=max_steps if e.max_steps is None else e.max_steps,
                feasible=e.feasible,
                description=e.description,
            )
            for name, e in entries.items()
        }
        self.feasible = tuple(t for t, s in self.specs.items() if s.feasible)
        self.infeasible = tuple(t for t, s in self.specs.items() if not s.feasible)

    def logic(self, spec: TaskSpec) -> L:
        """The logic of a suite task spec."""
        name = str(spec.setup.get("task", spec.name))
        if name not in self.entries:
            raise ConfigError(f"no {self.kind} task {name!r}; tasks: {', '.join(self.entries)}")
        return self.entries[name].logic()

    def spec(self, task: str) -> TaskSpec:
        """The spec of ``<kind>/<task>`` (or ``<task>``)."""
        env_id = task if task.startswith(f"{self.kind}/") else f"{self.kind}/{task}"
        if env_id not in self.specs:
            raise ConfigError(f"no {self.kind} task {task!r}; tasks: {', '.join(self.specs)}")
        return self.specs[env_id]

    def register(self, make_env: Callable[..., Any]) -> None:
        """Register every task as a farm env made by ``make_env(task=<env id>)``."""
        for env_id, spec in self.specs.items():
            register(env_id, make_env, description=spec.description, task=env_id)
