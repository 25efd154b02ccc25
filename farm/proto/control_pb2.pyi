from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseRequest(_message.Message):
    __slots__ = ("kind", "ttl_s", "wait_timeout_s", "holder")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    kind: str
    ttl_s: float
    wait_timeout_s: float
    holder: str
    def __init__(self, kind: _Optional[str] = ..., ttl_s: _Optional[float] = ..., wait_timeout_s: _Optional[float] = ..., holder: _Optional[str] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("lease_id", "sandbox_id", "endpoint", "kind", "env", "group", "ttl_s")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    sandbox_id: str
    endpoint: str
    kind: str
    env: str
    group: str
    ttl_s: float
    def __init__(self, lease_id: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., kind: _Optional[str] = ..., env: _Optional[str] = ..., group: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("expires_in_s",)
    EXPIRES_IN_S_FIELD_NUMBER: _ClassVar[int]
    expires_in_s: float
    def __init__(self, expires_in_s: _Optional[float] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("lease_id", "reset")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    reset: bool
    def __init__(self, lease_id: _Optional[str] = ..., reset: _Optional[bool] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("already_ended", "message")
    ALREADY_ENDED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    already_ended: bool
    message: str
    def __init__(self, already_ended: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SandboxStatus(_message.Message):
    __slots__ = ("id", "group", "kind", "env", "backend", "endpoint", "state", "health", "lease_id", "holder", "leases_total", "restarts", "resets", "start_failures", "uptime_s", "pid", "last_error", "incarnation")
    ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    RESETS_FIELD_NUMBER: _ClassVar[int]
    START_FAILURES_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    id: str
    group: str
    kind: str
    env: str
    backend: str
    endpoint: str
    state: str
    health: str
    lease_id: str
    holder: str
    leases_total: int
    restarts: int
    resets: int
    start_failures: int
    uptime_s: float
    pid: int
    last_error: str
    incarnation: int
    def __init__(self, id: _Optional[str] = ..., group: _Optional[str] = ..., kind: _Optional[str] = ..., env: _Optional[str] = ..., backend: _Optional[str] = ..., endpoint: _Optional[str] = ..., state: _Optional[str] = ..., health: _Optional[str] = ..., lease_id: _Optional[str] = ..., holder: _Optional[str] = ..., leases_total: _Optional[int] = ..., restarts: _Optional[int] = ..., resets: _Optional[int] = ..., start_failures: _Optional[int] = ..., uptime_s: _Optional[float] = ..., pid: _Optional[int] = ..., last_error: _Optional[str] = ..., incarnation: _Optional[int] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("sandboxes", "control_address", "metrics_address", "pid", "uptime_s", "state_dir", "spec_path", "shutting_down")
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    CONTROL_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    STATE_DIR_FIELD_NUMBER: _ClassVar[int]
    SPEC_PATH_FIELD_NUMBER: _ClassVar[int]
    SHUTTING_DOWN_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[SandboxStatus]
    control_address: str
    metrics_address: str
    pid: int
    uptime_s: float
    state_dir: str
    spec_path: str
    shutting_down: bool
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[SandboxStatus, _Mapping]]] = ..., control_address: _Optional[str] = ..., metrics_address: _Optional[str] = ..., pid: _Optional[int] = ..., uptime_s: _Optional[float] = ..., state_dir: _Optional[str] = ..., spec_path: _Optional[str] = ..., shutting_down: _Optional[bool] = ...) -> None: ...

class ShutdownRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ShutdownResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
