"""The one exception tree of farm.

Every error farm raises derives from :class:`FarmError`. Errors that come back
from a server carry the gRPC status code that names the kind of failure::

    FarmError
    ├── ConfigError                 bad configuration or arguments (local)
    │   └── EnvNotFoundError        an env id / import path that resolves to nothing
    ├── MissingExtraError           an optional dependency is not installed
    ├── EncodingError               a value that does not fit its space (local)
    └── RemoteError                 the server answered with an error status
        ├── InvalidArgumentError    INVALID_ARGUMENT: bad action, bad options
        ├── FailedPreconditionError FAILED_PRECONDITION: step before reset, ...
        ├── ResourceExhaustedError  RESOURCE_EXHAUSTED: too many sessions, too large
        ├── UnauthenticatedError    UNAUTHENTICATED: missing or wrong token
        ├── ProtocolError           UNIMPLEMENTED / version mismatch / malformed messages
        ├── EnvError                INTERNAL: the environment itself raised
        └── SandboxUnavailableError UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED: the
                                    sandbox went away (crashed, reaped, shut down)
"""

from __future__ import annotations

import grpc


class FarmError(Exception):
    """Base class of every farm error."""


class ConfigError(FarmError, ValueError):
    """Invalid configuration or arguments."""


class EnvNotFoundError(ConfigError, LookupError):
    """An environment id or import path that does not resolve."""


class MissingExtraError(FarmError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"{module!r} is not installed; install it with: pip install 'farm[{extra}]'"
        )
        self.module = module
        self.extra = extra


class EncodingError(FarmError, ValueError):
    """A value that cannot be encoded for (or decoded from) its space."""


class RemoteError(FarmError):
    """An error status returned by a farm server."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"[{self.code.name}] {self.args[0]}"


class InvalidArgumentError(RemoteError, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPreconditionError(RemoteError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhaustedError(RemoteError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnauthenticatedError(RemoteError, PermissionError):
    code = grpc.StatusCode.UNAUTHENTICATED


class ProtocolError(RemoteError):
    code = grpc.StatusCode.UNIMPLEMENTED


class EnvError(RemoteError):
    code = grpc.StatusCode.INTERNAL


class SandboxUnavailableError(RemoteError, ConnectionError):
    code = grpc.StatusCode.UNAVAILABLE


_BY_CODE: dict[grpc.StatusCode, type[RemoteError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: UnauthenticatedError,
    grpc.StatusCode.UNIMPLEMENTED: ProtocolError,
    grpc.StatusCode.INTERNAL: EnvError,
    grpc.StatusCode.UNKNOWN: EnvError,
    grpc.StatusCode.UNAVAILABLE: SandboxUnavailableError,
    grpc.StatusCode.CANCELLED: SandboxUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: SandboxUnavailableError,
    grpc.StatusCode.ABORTED: SandboxUnavailableError,
}

_CODE_BY_NUMBER: dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


def status_code(number: int) -> grpc.StatusCode:
    """The :class:`grpc.StatusCode` for its wire number (UNKNOWN if unheard of)."""
    return _CODE_BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN)


def from_status(code: grpc.StatusCode, message: str) -> RemoteError:
    """The farm exception for a gRPC status."""
    cls = _BY_CODE.get(code, RemoteError)
    return cls(message or code.name, code)


def from_rpc_error(err: grpc.RpcError) -> RemoteError:
    """Translate a raw :class:`grpc.RpcError` (sync or aio) into the farm tree."""
    code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
    details = err.details() if callable(getattr(err, "details", None)) else str(err)
    return from_status(code, details or "")
