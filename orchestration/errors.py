"""Orchestration errors, as branches of farm's one exception tree (:mod:`farm.errors`)::

FarmError
├── ConfigError
│   ├── SpecError                  an invalid farm spec (each problem named by key path)
│   └── BackendNotAvailableError   a backend that is not built or cannot run here
├── OrchestrationError
│   ├── FarmAlreadyRunningError    a second ``farm up`` on the same control address
│   ├── FarmNotRunningError        no controller answers at the control address
│   └── FarmStartError             the sandboxes did not all become healthy
└── RemoteError (answers of the control service)
    ├── NoSuchKindError            NOT_FOUND: a lease for a kind with no sandboxes
    ├── UnknownLeaseError          NOT_FOUND: a lease id the controller never gave
    ├── LeaseTimeoutError          RESOURCE_EXHAUSTED: all sandboxes stayed busy
    └── LeaseLostError             FAILED_PRECONDITION: the lease's sandbox died or
                                   the lease expired; the episode was truncated for
                                   infrastructure reasons
"""

from __future__ import annotations

import grpc

from farm.errors import (
    ConfigError,
    FailedPreconditionError,
    FarmError,
    RemoteError,
    ResourceExhaustedError,
    from_rpc_error,
)


class SpecError(ConfigError):
    """An invalid farm spec. ``problems`` lists ``(key path, message)`` pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {path}: {msg}" if path else f"  {msg}" for path, msg in problems)
        super().__init__(f"invalid farm spec {source}:\n{lines}")


class BackendNotAvailableError(ConfigError):
    """An unknown backend, or one that cannot run on this host (no daemon, no Ray)."""


class OrchestrationError(FarmError):
    """Base class of the controller's and the CLI's own failures."""


class FarmAlreadyRunningError(OrchestrationError):
    """A controller already serves this control address."""


class FarmNotRunningError(OrchestrationError, ConnectionError):
    """No controller answers at the control address."""


class FarmStartError(OrchestrationError):
    """The farm did not become healthy (a sandbox kept failing to start, or a timeout)."""


class NoSuchKindError(RemoteError, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class UnknownLeaseError(RemoteError, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class LeaseTimeoutError(ResourceExhaustedError, TimeoutError):
    pass


class LeaseLostError(FailedPreconditionError):
    """The lease ended under its holder: its sandbox died or it expired."""


def control_error(err: grpc.RpcError, not_found: type[RemoteError]) -> FarmError:
    """Translate an error of the control service into this tree."""
    code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
    details = (err.details() if callable(getattr(err, "details", None)) else "") or code.name
    if code == grpc.StatusCode.NOT_FOUND:
        return not_found(details, code)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return LeaseTimeoutError(details, code)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return LeaseLostError(details, code)
    if code == grpc.StatusCode.UNAVAILABLE:
        return FarmNotRunningError(f"the farm controller is not reachable: {details}")
    return from_rpc_error(err)


class SandboxStartError(OrchestrationError):
    """A backend could not start a sandbox (the message holds its output)."""
