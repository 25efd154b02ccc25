"""What the controller knows about each sandbox and each lease.

Sandbox states::

    starting ──► healthy ◄──► leased
       ▲            │            │  process died / health failed / over a limit
       │            ▼            ▼
    restarting ◄── unhealthy ◄───┘        (reset: healthy/leased ──► restarting)
                                           (farm down: any ──► stopped)
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field

from orchestration.backends.base import SandboxHandle
from orchestration.spec import RestartOptions, SandboxGroup


class SandboxState(enum.StrEnum):
    STARTING = "starting"
    HEALTHY = "healthy"
    LEASED = "leased"
    UNHEALTHY = "unhealthy"
    RESTARTING = "restarting"
    STOPPED = "stopped"


def restart_delay(consecutive: int, opts: RestartOptions) -> float:
    """Backoff before the ``consecutive``-th restart in a row (counting from 1):
    ``0`` for the first, then ``min(backoff_max_s, backoff_s * 2 ** (n - 2))``."""
    if consecutive <= 1:
        return 0.0
    return min(opts.backoff_max_s, opts.backoff_s * 2 ** (consecutive - 2))


@dataclass
class Lease:
    """A job's hold on one sandbox. It expires ``ttl_s`` after the last heartbeat."""

    lease_id: str
    sandbox_id: str
    holder: str
    ttl_s: float
    granted_at: float = field(default_factory=time.monotonic)
    expires_at: float = 0.0

    def __post_init__(self) -> None:
        self.expires_at = self.granted_at + self.ttl_s

    def beat(self) -> float:
        self.expires_at = time.monotonic() + self.ttl_s
        return self.ttl_s


@dataclass
class Sandbox:
    """One sandbox slot (``toy-0``): its incarnations come and go, the slot stays."""

    sandbox_id: str
    group: SandboxGroup
    state: SandboxState = SandboxState.STARTING
    incarnation: int = 0
    handle: SandboxHandle | None = None
    lease: Lease | None = None
    health: str = "-"
    health_failures: int = 0
    restarts: int = 0  # replacements after a death, failed health or a limit
    resets: int = 0  # planned restarts (lease expired, release with reset)
    consecutive: int = 0  # restarts in a row without a stable period
    start_failures: int = 0  # failed starts in a row
    leases_total: int = 0
    healthy_since: float | None = None
    last_error: str = ""
    reset_reason: str | None = None  # a reset was asked for and not yet begun
    reset_requested_at: float = 0.0  # when the reset was asked for / the failure seen
    recovering: str | None = None  # "reset" or "replace" until the next healthy
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def kind(self) -> str:
        return self.group.kind

    @property
    def env(self) -> str:
        return self.group.env

    @property
    def endpoint(self) -> str:
        return self.handle.endpoint if self.handle else ""

    def matches(self, selector: str) -> bool:
        return selector in (self.group.kind, self.group.group, self.group.env)

    @property
    def free(self) -> bool:
        return self.state is SandboxState.HEALTHY and self.lease is None and not self.reset_reason
