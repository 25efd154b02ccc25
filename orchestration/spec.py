"""The farm spec: which sandboxes to run, where, with which limits, and where the
control endpoint listens. YAML, validated strictly (unknown keys, wrong types,
negative counts and unknown kinds are errors naming their key path)::

    state_dir: ~/.farm                  # default: $FARM_HOME, else ~/.farm
    control:
      address: unix:///home/me/.farm/control.sock   # default: <state_dir>/control.sock
      metrics_port: 9464                # Prometheus on 127.0.0.1; null: off, 0: any free port
    sandboxes:
      - kind: toy                       # toy | browser | desktop | android
        env: toy/text-task              # the env id ``farm serve`` gets
        count: 4
        backend: local                  # local | docker | ray
        env_kwargs: {}
        limits: {memory_mb: 1024, pids: 256}

See ``orchestration/examples/farm.yaml`` for every key.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from farm.address import Address
from farm.errors import ConfigError
from orchestration.errors import SpecError

KINDS = ("toy", "browser", "desktop", "android")
BACKENDS = ("local", "docker", "ray")
UNIX_PATH_MAX = 107  # sun_path is 108 bytes including the NUL

Kind = Literal["toy", "browser", "desktop", "android"]
BackendName = Literal["local", "docker", "ray"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Limits(_Strict):
    """Per-sandbox resource limits; ``None`` means unlimited.

    How the local backend enforces them: ``memory_mb`` and ``pids`` are watched
    (resident memory and process count of the sandbox's process group, checked
    with every health check; a sandbox over either is replaced), ``pids`` is also
    ``RLIMIT_NPROC`` (per user on Linux, so only a backstop, and not enforced for
    root), ``address_space_mb`` is ``RLIMIT_AS`` (a hard cap; do not set it for
    browsers, Chromium reserves far more address space than it uses), and
    ``cpus`` is advisory here (the docker backend enforces ``memory_mb``, ``pids``
    and ``cpus`` through cgroups: see :mod:`orchestration.backends.docker`).
    """

    memory_mb: int | None = Field(default=None, gt=0)
    pids: int | None = Field(default=None, gt=0)
    cpus: float | None = Field(default=None, gt=0)
    address_space_mb: int | None = Field(default=None, gt=0)


class ServerOptions(_Strict):
    """Options of each sandbox's ``farm serve`` (see ``farm serve --help``)."""

    max_sessions: int = Field(default=8, ge=1)
    idle_timeout_s: float = Field(default=300.0, gt=0)
    executor: Literal["thread", "inline"] = "thread"
    max_message_mb: float = Field(default=64.0, gt=0)

    def args(self) -> list[str]:
        """These options as ``farm serve`` arguments."""
        return [
            "--max-sessions",
            str(self.max_sessions),
            "--idle-timeout",
            str(self.idle_timeout_s),
            "--executor",
            self.executor,
            "--max-message-mb",
            str(self.max_message_mb),
        ]


class RayOptions(_Strict):
    """Where the ray backend runs sandboxes (farm level, or per group).

    ``address``: ``auto`` (default: ``$RAY_ADDRESS``, else the cluster ``ray
    start`` last started here), ``HOST:PORT`` of a running cluster, or ``local``
    (a private one-node cluster inside the controller); one per farm.
    ``resources``: Ray custom resources each sandbox's actor needs (default:
    ``{farm_<kind>: 1}`` if a node advertises it); see
    :mod:`orchestration.backends.ray`.
    """

    address: str | None = Field(default=None, min_length=1)
    resources: dict[str, float] | None = None

    @model_validator(mode="after")
    def _custom_resources(self) -> RayOptions:
        for key, amount in (self.resources or {}).items():
            if key in ("CPU", "GPU", "memory", "object_store_memory"):
                raise ValueError(
                    f"ray.resources: {key!r} is not a custom resource; use limits.cpus / "
                    "limits.memory_mb"
                )
            if amount <= 0:
                raise ValueError(f"ray.resources: {key!r} must be > 0, got {amount:g}")
        return self


class SandboxGroup(_Strict):
    """``count`` identical sandboxes of one kind serving one env id."""

    kind: Kind
    env: str = Field(min_length=1)
    count: int = Field(default=1, ge=0)
    name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")
    backend: BackendName = "local"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    environ: dict[str, str] = Field(default_factory=dict)
    server: ServerOptions = Field(default_factory=ServerOptions)
    limits: Limits = Field(default_factory=Limits)
    startup_timeout_s: float = Field(default=60.0, gt=0)
    ray: RayOptions | None = None

    @property
    def group(self) -> str:
        """The group's name: ``name``, else the env id's last part (``click-button``)."""
        if self.name:
            return self.name
        return re.sub(r"[^a-z0-9_-]+", "-", self.env.lower().rsplit("/", 1)[-1]).strip("-")[:32]


class ControlOptions(_Strict):
    """The control endpoint and the lease rules."""

    address: str | None = None  # default: unix://<state_dir>/control.sock
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    lease_ttl_s: float = Field(default=30.0, gt=0)
    max_lease_wait_s: float = Field(default=300.0, gt=0)


class HealthOptions(_Strict):
    """A sandbox is replaced after ``failures`` consecutive failed checks."""

    interval_s: float = Field(default=1.0, gt=0)
    timeout_s: float = Field(default=3.0, gt=0)
    failures: int = Field(default=3, ge=1)


class RestartOptions(_Strict):
    """Backoff before the n-th consecutive restart: 0 for n = 1, else
    ``min(backoff_max_s, backoff_s * 2 ** (n - 2))``; n returns to 0 once the
    sandbox has been healthy for ``stable_s``."""

    backoff_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    stable_s: float = Field(default=30.0, ge=0)


class FarmSpec(_Strict):
    """A whole farm. Use :func:`load_spec` / :func:`parse_spec` to build one."""

    version: Literal[1] = 1
    state_dir: str | None = None
    control: ControlOptions = Field(default_factory=ControlOptions)
    health: HealthOptions = Field(default_factory=HealthOptions)
    restart: RestartOptions = Field(default_factory=RestartOptions)
    sandboxes: list[SandboxGroup] = Field(min_length=1)
    ray: RayOptions | None = None

    @model_validator(mode="after")
    def _one_ray_address(self) -> FarmSpec:
        for i, g in enumerate(self.sandboxes):
            if g.ray is not None and g.backend != "ray":
                raise ValueError(f"sandboxes[{i}].ray: only for `backend: ray`")
        farm = self.ray.address if self.ray is not None else None
        seen = {
            g.ray.address
            for g in self.sandboxes
            if g.backend == "ray" and g.ray is not None and g.ray.address
        }
        if len(seen | ({farm} if farm else set())) > 1:
            raise ValueError(
                "ray.address: one farm connects to one Ray cluster; got "
                + ", ".join(sorted(seen | ({farm} if farm else set())))
            )
        return self

    @model_validator(mode="after")
    def _unique_groups(self) -> FarmSpec:
        seen: dict[str, int] = {}
        for i, g in enumerate(self.sandboxes):
            if g.group in seen:
                raise ValueError(
                    f"sandboxes[{i}]: group name {g.group!r} is also used by "
                    f"sandboxes[{seen[g.group]}]; give one of them a distinct `name`"
                )
            seen[g.group] = i
        return self

    @property
    def state_path(self) -> Path:
        """The state directory (sockets, pid file, logs), absolute."""
        return resolve_state_dir(self.state_dir)

    @property
    def control_address(self) -> str:
        return self.control.address or default_control_address(self.state_path)

    @property
    def kinds(self) -> list[str]:
        return sorted({g.kind for g in self.sandboxes})


def resolve_state_dir(state_dir: str | None = None) -> Path:
    """``state_dir``, else ``$FARM_HOME``, else ``~/.farm``; ``~`` and vars expanded."""
    raw = state_dir or os.environ.get("FARM_HOME") or "~/.farm"
    return Path(os.path.expandvars(os.path.expanduser(raw))).absolute()


def default_control_address(state_dir: Path) -> str:
    return f"unix://{state_dir / 'control.sock'}"


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _allowed_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed at ``loc`` (the location of an unknown key)."""
    model: Any = FarmSpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        model = next(
            (a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None
        )
        if model is None:
            return []
    return list(model.model_fields)


def _message(err: Any) -> str:
    kind, loc, given = err["type"], err["loc"], err.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc)
        return f"unknown key {loc[-1]!r}" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    if kind == "literal_error" and loc and loc[-1] == "kind":
        return f"unknown kind {given!r}; expected one of: {', '.join(KINDS)}"
    if kind == "literal_error" and loc and loc[-1] == "backend":
        return f"unknown backend {given!r}; expected one of: {', '.join(BACKENDS)}"
    if kind == "greater_than_equal" and loc and loc[-1] == "count":
        return f"count must be >= 0, got {given!r}"
    if kind == "missing":
        return "required key is missing"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"{err['msg'].lower()}, got {type(given).__name__} {given!r}"
    return f"{err['msg']} (got {given!r})" if "input" in err else err["msg"]


def parse_spec(data: Any, source: str = "<spec>") -> FarmSpec:
    """Validate a spec given as plain data; :class:`SpecError` lists every problem."""
    if not isinstance(data, dict):
        raise SpecError(source, [("", f"expected a mapping at the top, got {type(data).__name__}")])
    try:
        spec = FarmSpec.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            if err["type"] == "value_error":  # our own validators name their paths
                problems.append(("", str(err["msg"]).removeprefix("Value error, ")))
            else:
                problems.append((_path(err["loc"]), _message(err)))
        raise SpecError(source, problems) from None
    _check_paths(spec, source)
    return spec


def _check_paths(spec: FarmSpec, source: str) -> None:
    try:
        addr = Address.parse(spec.control_address)
    except ConfigError as e:
        raise SpecError(source, [("control.address", str(e))]) from None
    if not addr.is_loopback:
        raise SpecError(
            source,
            [("control.address", "the control endpoint binds only to unix sockets or loopback")],
        )
    if addr.is_unix and len(addr.unix_path or "") > UNIX_PATH_MAX:
        key = "control.address" if spec.control.address else "state_dir"
        raise SpecError(
            source, [(key, f"unix socket path longer than {UNIX_PATH_MAX} bytes: {addr.unix_path}")]
        )


def load_spec(path: str | os.PathLike[str]) -> FarmSpec:
    """Read and validate a YAML farm spec file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read farm spec {p}: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(str(p), [("", f"not valid YAML: {e}")]) from None
    return parse_spec(data, str(p))
