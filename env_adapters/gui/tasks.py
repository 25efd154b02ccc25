"""The task spec format shared by every suite (browser, desktop, Android).

A task is data: which sandbox kind runs it, how to set it up, how to evaluate
it, how long it may take, and whether it can be done at all. Infeasible tasks
ask for something the sandbox does not offer; the correct answer is ``fail()``
(reward 1), anything else earns 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
