from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ImageEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_ENCODING_RAW: _ClassVar[ImageEncoding]
    IMAGE_ENCODING_PNG: _ClassVar[ImageEncoding]
    IMAGE_ENCODING_JPEG: _ClassVar[ImageEncoding]
IMAGE_ENCODING_RAW: ImageEncoding
IMAGE_ENCODING_PNG: ImageEncoding
IMAGE_ENCODING_JPEG: ImageEncoding

class Array(_message.Message):
    __slots__ = ("dtype", "shape", "data", "encoding")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    encoding: ImageEncoding
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ..., encoding: _Optional[_Union[ImageEncoding, str]] = ...) -> None: ...

class ValueList(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, items: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class ValueDict(_message.Message):
    __slots__ = ("keys", "values")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("array", "int", "text", "dict", "tuple", "sequence")
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    INT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DICT_FIELD_NUMBER: _ClassVar[int]
    TUPLE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    array: Array
    int: int
    text: str
    dict: ValueDict
    tuple: ValueList
    sequence: ValueList
    def __init__(self, array: _Optional[_Union[Array, _Mapping]] = ..., int: _Optional[int] = ..., text: _Optional[str] = ..., dict: _Optional[_Union[ValueDict, _Mapping]] = ..., tuple: _Optional[_Union[ValueList, _Mapping]] = ..., sequence: _Optional[_Union[ValueList, _Mapping]] = ...) -> None: ...

class BoxSpace(_message.Message):
    __slots__ = ("low", "high")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    low: Array
    high: Array
    def __init__(self, low: _Optional[_Union[Array, _Mapping]] = ..., high: _Optional[_Union[Array, _Mapping]] = ...) -> None: ...

class DiscreteSpace(_message.Message):
    __slots__ = ("n", "start", "dtype")
    N_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    n: int
    start: int
    dtype: str
    def __init__(self, n: _Optional[int] = ..., start: _Optional[int] = ..., dtype: _Optional[str] = ...) -> None: ...

class MultiDiscreteSpace(_message.Message):
    __slots__ = ("nvec", "start")
    NVEC_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    nvec: Array
    start: Array
    def __init__(self, nvec: _Optional[_Union[Array, _Mapping]] = ..., start: _Optional[_Union[Array, _Mapping]] = ...) -> None: ...

class MultiBinarySpace(_message.Message):
    __slots__ = ("shape",)
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, shape: _Optional[_Iterable[int]] = ...) -> None: ...

class TextSpace(_message.Message):
    __slots__ = ("min_length", "max_length", "charset")
    MIN_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    CHARSET_FIELD_NUMBER: _ClassVar[int]
    min_length: int
    max_length: int
    charset: str
    def __init__(self, min_length: _Optional[int] = ..., max_length: _Optional[int] = ..., charset: _Optional[str] = ...) -> None: ...

class DictSpace(_message.Message):
    __slots__ = ("keys", "spaces")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    SPACES_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    spaces: _containers.RepeatedCompositeFieldContainer[Space]
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., spaces: _Optional[_Iterable[_Union[Space, _Mapping]]] = ...) -> None: ...

class TupleSpace(_message.Message):
    __slots__ = ("spaces",)
    SPACES_FIELD_NUMBER: _ClassVar[int]
    spaces: _containers.RepeatedCompositeFieldContainer[Space]
    def __init__(self, spaces: _Optional[_Iterable[_Union[Space, _Mapping]]] = ...) -> None: ...

class SequenceSpace(_message.Message):
    __slots__ = ("feature_space", "stack")
    FEATURE_SPACE_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    feature_space: Space
    stack: bool
    def __init__(self, feature_space: _Optional[_Union[Space, _Mapping]] = ..., stack: _Optional[bool] = ...) -> None: ...

class OneOfSpace(_message.Message):
    __slots__ = ("spaces",)
    SPACES_FIELD_NUMBER: _ClassVar[int]
    spaces: _containers.RepeatedCompositeFieldContainer[Space]
    def __init__(self, spaces: _Optional[_Iterable[_Union[Space, _Mapping]]] = ...) -> None: ...

class Space(_message.Message):
    __slots__ = ("box", "discrete", "multi_discrete", "multi_binary", "text", "dict", "tuple", "sequence", "one_of")
    BOX_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_FIELD_NUMBER: _ClassVar[int]
    MULTI_DISCRETE_FIELD_NUMBER: _ClassVar[int]
    MULTI_BINARY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DICT_FIELD_NUMBER: _ClassVar[int]
    TUPLE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ONE_OF_FIELD_NUMBER: _ClassVar[int]
    box: BoxSpace
    discrete: DiscreteSpace
    multi_discrete: MultiDiscreteSpace
    multi_binary: MultiBinarySpace
    text: TextSpace
    dict: DictSpace
    tuple: TupleSpace
    sequence: SequenceSpace
    one_of: OneOfSpace
    def __init__(self, box: _Optional[_Union[BoxSpace, _Mapping]] = ..., discrete: _Optional[_Union[DiscreteSpace, _Mapping]] = ..., multi_discrete: _Optional[_Union[MultiDiscreteSpace, _Mapping]] = ..., multi_binary: _Optional[_Union[MultiBinarySpace, _Mapping]] = ..., text: _Optional[_Union[TextSpace, _Mapping]] = ..., dict: _Optional[_Union[DictSpace, _Mapping]] = ..., tuple: _Optional[_Union[TupleSpace, _Mapping]] = ..., sequence: _Optional[_Union[SequenceSpace, _Mapping]] = ..., one_of: _Optional[_Union[OneOfSpace, _Mapping]] = ...) -> None: ...

class EnvSpec(_message.Message):
    __slots__ = ("env_id", "observation_space", "action_space", "metadata_json")
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_SPACE_FIELD_NUMBER: _ClassVar[int]
    ACTION_SPACE_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    observation_space: Space
    action_space: Space
    metadata_json: bytes
    def __init__(self, env_id: _Optional[str] = ..., observation_space: _Optional[_Union[Space, _Mapping]] = ..., action_space: _Optional[_Union[Space, _Mapping]] = ..., metadata_json: _Optional[bytes] = ...) -> None: ...

class OpenRequest(_message.Message):
    __slots__ = ("protocol_versions", "image_encoding", "jpeg_quality", "client_name")
    PROTOCOL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ENCODING_FIELD_NUMBER: _ClassVar[int]
    JPEG_QUALITY_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    protocol_versions: _containers.RepeatedScalarFieldContainer[str]
    image_encoding: ImageEncoding
    jpeg_quality: int
    client_name: str
    def __init__(self, protocol_versions: _Optional[_Iterable[str]] = ..., image_encoding: _Optional[_Union[ImageEncoding, str]] = ..., jpeg_quality: _Optional[int] = ..., client_name: _Optional[str] = ...) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("seed", "options_json")
    SEED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    seed: int
    options_json: bytes
    def __init__(self, seed: _Optional[int] = ..., options_json: _Optional[bytes] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("action",)
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action: Value
    def __init__(self, action: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class CloseRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("open", "reset", "step", "close")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    open: OpenRequest
    reset: ResetRequest
    step: StepRequest
    close: CloseRequest
    def __init__(self, open: _Optional[_Union[OpenRequest, _Mapping]] = ..., reset: _Optional[_Union[ResetRequest, _Mapping]] = ..., step: _Optional[_Union[StepRequest, _Mapping]] = ..., close: _Optional[_Union[CloseRequest, _Mapping]] = ...) -> None: ...

class OpenResponse(_message.Message):
    __slots__ = ("protocol_version", "session_id", "env")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    session_id: str
    env: EnvSpec
    def __init__(self, protocol_version: _Optional[str] = ..., session_id: _Optional[str] = ..., env: _Optional[_Union[EnvSpec, _Mapping]] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ("observation", "info_json")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    observation: Value
    info_json: bytes
    def __init__(self, observation: _Optional[_Union[Value, _Mapping]] = ..., info_json: _Optional[bytes] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("observation", "reward", "terminated", "truncated", "info_json")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    observation: Value
    reward: float
    terminated: bool
    truncated: bool
    info_json: bytes
    def __init__(self, observation: _Optional[_Union[Value, _Mapping]] = ..., reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., info_json: _Optional[bytes] = ...) -> None: ...

class CloseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("opened", "reset", "step", "closed", "error")
    OPENED_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    opened: OpenResponse
    reset: ResetResponse
    step: StepResponse
    closed: CloseResponse
    error: Error
    def __init__(self, opened: _Optional[_Union[OpenResponse, _Mapping]] = ..., reset: _Optional[_Union[ResetResponse, _Mapping]] = ..., step: _Optional[_Union[StepResponse, _Mapping]] = ..., closed: _Optional[_Union[CloseResponse, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("protocol_versions", "server_version", "env")
    PROTOCOL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    protocol_versions: _containers.RepeatedScalarFieldContainer[str]
    server_version: str
    env: EnvSpec
    def __init__(self, protocol_versions: _Optional[_Iterable[str]] = ..., server_version: _Optional[str] = ..., env: _Optional[_Union[EnvSpec, _Mapping]] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("status", "env_id", "server_version", "active_sessions", "max_sessions", "total_sessions", "reaped_sessions", "uptime_s")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNKNOWN: _ClassVar[HealthResponse.Status]
        STATUS_SERVING: _ClassVar[HealthResponse.Status]
        STATUS_DRAINING: _ClassVar[HealthResponse.Status]
    STATUS_UNKNOWN: HealthResponse.Status
    STATUS_SERVING: HealthResponse.Status
    STATUS_DRAINING: HealthResponse.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    REAPED_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    status: HealthResponse.Status
    env_id: str
    server_version: str
    active_sessions: int
    max_sessions: int
    total_sessions: int
    reaped_sessions: int
    uptime_s: float
    def __init__(self, status: _Optional[_Union[HealthResponse.Status, str]] = ..., env_id: _Optional[str] = ..., server_version: _Optional[str] = ..., active_sessions: _Optional[int] = ..., max_sessions: _Optional[int] = ..., total_sessions: _Optional[int] = ..., reaped_sessions: _Optional[int] = ..., uptime_s: _Optional[float] = ...) -> None: ...
