"""The interface every backend implements (local now; docker and ray later).

A backend starts one sandbox incarnation at a time and knows nothing about
leases or health: the controller calls :meth:`Backend.start` (returns once the
sandbox serves), polls :meth:`Backend.exit_reason` and :meth:`Backend.usage`,
and calls :meth:`Backend.stop` (which must leave nothing behind: no process,
container or socket file). Every sandbox a backend starts is recorded so that
:meth:`Backend.list_orphans` finds those a crashed controller left, and
:meth:`Backend.remove_orphan` removes them.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestration.spec import SandboxGroup


@dataclass(frozen=True)
class SandboxRequest:
    """One incarnation of one sandbox: ``toy-0`` incarnation 3 serving the group's env."""

    sandbox_id: str
    incarnation: int
    group: SandboxGroup


@dataclass
class SandboxHandle:
    """A running sandbox incarnation. ``detail`` is the backend's own (process, container)."""

    sandbox_id: str
    incarnation: int
    backend: str
    endpoint: str
    pid: int | None = None
    detail: Any = field(default=None, repr=False)


@dataclass(frozen=True)
class Usage:
    """What a sandbox uses now (None: unknown)."""

    memory_mb: float | None = None
    pids: int | None = None


@dataclass(frozen=True)
class Orphan:
    """A sandbox left running by a controller that is gone."""

    sandbox_id: str
    backend: str
    endpoint: str
    description: str
    detail: Any = field(default=None, repr=False)


class Backend(abc.ABC):
    """Starts and stops sandboxes of one kind of infrastructure under one state dir."""

    name: str = "?"

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    @abc.abstractmethod
    async def start(self, request: SandboxRequest) -> SandboxHandle:
        """Start the sandbox; return once it serves. Raises ``SandboxStartError``."""

    @abc.abstractmethod
    async def stop(self, handle: SandboxHandle, grace_s: float = 5.0) -> None:
        """Stop it (graceful, then forced) and remove everything it left."""

    @abc.abstractmethod
    def exit_reason(self, handle: SandboxHandle) -> str | None:
        """None while the sandbox runs; else why it ended (``killed by SIGKILL``)."""

    def usage(self, handle: SandboxHandle) -> Usage:
        """Resource use now, for the limit watchdog (unknown by default)."""
        return Usage()

    @abc.abstractmethod
    def list_orphans(self) -> list[Orphan]:
        """Sandboxes this backend started under this state dir whose controller is gone."""

    @abc.abstractmethod
    def remove_orphan(self, orphan: Orphan) -> None:
        """Stop an orphan and remove what it left."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the backend's own resources (clients, connections)."""
