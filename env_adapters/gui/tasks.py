"""The task spec format shared by every suite (browser, desktop, Android).

A task is data: which sandbox kind runs it, how to set it up, how to evaluate
it, how long it may take, and whether it can be done at all. Infeasible tasks
ask for something the sandbox does not offer; the correct answer is ``fail()``
(reward 1), anything else earns 0.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from farm.errors import InvalidArgumentError


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
