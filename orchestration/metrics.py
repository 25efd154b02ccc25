"""Prometheus metrics of a farm, served on 127.0.0.1 (``control.metrics_port``)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from orchestration.state import Sandbox, SandboxState

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_RESET_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60)


class FarmMetrics:
    """The farm's metrics, in a registry of their own (several farms per process in tests)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sandboxes = Gauge(
            "farm_sandboxes", "Sandboxes by kind and state", ["kind", "state"], registry=r
        )
        self.lease_latency = Histogram(
            "farm_lease_latency_seconds",
            "Time from a Lease request to its grant",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.lease_failures = Counter(
            "farm_lease_failures_total",
            "Lease requests that failed",
            ["kind", "reason"],
            registry=r,
        )
        self.restarts = Counter(
            "farm_sandbox_restarts_total",
            "Sandboxes replaced (died, failed health, over a limit)",
            ["kind", "reason"],
            registry=r,
        )
        self.reset_time = Histogram(
            "farm_sandbox_reset_seconds",
            "Time from a reset request (lease expired or released with reset) to healthy",
            ["kind"],
            buckets=_RESET_BUCKETS,
            registry=r,
        )
        self.replace_time = Histogram(
            "farm_sandbox_replace_seconds",
            "Time from a sandbox's failure being noticed to its replacement serving",
            ["kind"],
            buckets=_RESET_BUCKETS,
            registry=r,
        )
        self._server: Any = None
        self.address = ""

    def observe_states(self, sandboxes: Iterable[Sandbox], kinds: Iterable[str]) -> None:
        tally = Tally((sb.kind, sb.state.value) for sb in sandboxes)
        for kind in kinds:
            for state in SandboxState:
                self.sandboxes.labels(kind, state.value).set(tally.get((kind, state.value), 0))

    def serve(self, port: int) -> str:
        """Serve /metrics on 127.0.0.1:``port`` (0: a free one); returns ``host:port``."""
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        self._server = server
        self.address = f"127.0.0.1:{server.server_port}"
        return self.address

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
