"""The ray backend: each sandbox is a Ray actor that runs ``farm serve`` on its node.

* **Connection.** The controller is a Ray driver: ``ray.init(address=...)`` with
  the spec's ``ray.address`` (farm level, or the same on every ray group):
  ``auto`` (the default; Ray's meaning: ``$RAY_ADDRESS``, else the cluster
  ``ray start`` last started on this machine; an error if there is none),
  ``HOST:PORT`` (a running cluster's GCS), or ``local`` (a private one-node
  cluster inside the controller: ``ray.init(_node_ip_address="127.0.0.1",
  include_dashboard=False)``, 100 MB object store, token auth with a token kept
  in the controller's environment, sessions under ``<state_dir>/ray``, stopped
  with the farm).
  An explicit ``HOST:PORT`` that nothing answers on fails at once instead of
  Ray's long retry. Ray rewrites a loopback node or GCS address to the machine's
  routable one; the backend keeps ``127.0.0.1`` as given while it connects (a
  cluster started with ``--node-ip-address=127.0.0.1`` binds only to loopback).
* **Placement.** Each actor asks for ``num_cpus`` = ``limits.cpus`` (default 1
  logical CPU), ``memory`` = ``limits.memory_mb`` (when set), and custom
  resources: the group's ``ray.resources`` (else the farm's), else
  ``{"farm_<kind>": 1}`` when some node advertises ``farm_<kind>`` (start nodes
  with ``ray start --resources='{"farm_browser": 4}'`` to dedicate them to a
  kind), else none. An actor that no node can take within ``startup_timeout_s``
  is a failed start whose error says what it asked for and what is free.
* **Sandbox.** The actor (``<sandbox id>.<incarnation>``, detached, no Ray
  restarts: the controller replaces it) starts ``farm serve`` as a child process
  bound to its node's IP on a free port (``--allow-remote`` when that IP is not
  loopback: the cluster's network must be trusted, as Ray's own ports are),
  with the group's limits as in the local backend; the endpoint
  ``IP:PORT`` goes back to the controller, so any node can reach it. The child
  gets ``PR_SET_PDEATHSIG``: it dies with the actor's worker process (``ray.kill``,
  a crash, node death). Its output stays on its node (the actor's temp dir).
* **Exit.** A standing ``wait_exit`` call on the actor returns when ``farm serve``
  ends (``farm serve killed by SIGKILL``) and raises when the actor dies (killed,
  its node died): :meth:`RayBackend.exit_reason` polls it without blocking.
  ``stop`` asks the actor to stop the server (SIGTERM, ``grace_s``, SIGKILL of its
  process group), then kills the actor and waits until Ray reports it gone.
* **Orphans.** Actors are named in the namespace ``farm-<hash of host and state
  dir>``; since one controller at a time holds a state dir, any actor there that
  this controller did not start was left by a crashed one: ``list_orphans`` finds
  them and ``remove_orphan`` kills them (which kills their servers).

Ray is the ``ray`` extra (``pip install 'farm[ray]'``); it is imported only when
a ray backend is made. Every node needs farm installed in the same Python
environment as the driver (Ray imports this module there).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import logging
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.address import Address
from farm.errors import ConfigError, MissingExtraError, SandboxUnavailableError
from orchestration.backends.base import Backend, Orphan, SandboxHandle, SandboxRequest, Usage
from orchestration.backends.local import LocalSandboxProcess, describe_exit
from orchestration.errors import BackendNotAvailableError, SandboxStartError
from orchestration.spec import FarmSpec, SandboxGroup

log = logging.getLogger("farm.ray")

_PDEATHSIG_EXEC = str(Path(__file__).with_name("_pdeathsig_exec.py"))
LOCAL_OBJECT_STORE_BYTES = 100 * 1024 * 1024  # sandboxes pass no objects through Ray
STOP_WAIT_S = 15.0  # how long to wait for Ray to report a killed actor gone
MAX_CONCURRENCY = 4  # actor calls at once: the standing wait_exit plus usage/stop
MAX_TEMP_DIR_CHARS = 40  # + Ray's session/socket names must stay < 108 bytes
_AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def import_ray() -> Any:
    """The ``ray`` module, or :class:`MissingExtraError` naming the extra."""
    try:
        import ray
    except ImportError:
        raise MissingExtraError("ray", "ray") from None
    return ray


def namespace_for(state_dir: Path) -> str:
    """``farm-<12 hex>``: the Ray namespace of the farm of this host and state dir."""
    key = f"{socket.gethostname()}:{Path(state_dir).absolute()}"
    return "farm-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def _is_loopback_target(address: str) -> bool:
    try:
        return Address.parse(address).is_loopback and not address.startswith("unix")
    except ConfigError:
        return False


@contextlib.contextmanager
def _keep_loopback(local_cluster: bool) -> Iterator[None]:
    """While connecting: keep ``127.0.0.1`` instead of Ray's rewrite to the routable IP.

    Ray 2.x turns a loopback GCS or node address into the host's routable address
    (``services.resolve_ip_for_localhost``), and, for a cluster it starts, picks
    that address as the node IP (and binds its servers there). Both are undone
    here for the duration of ``ray.init``; if a Ray version lacks these private
    hooks, nothing is patched.
    """
    try:
        from ray._private import ray_constants, services
    except ImportError:  # pragma: no cover - a Ray without these internals
        yield
        return
    saved_resolve = getattr(services, "resolve_ip_for_localhost", None)
    saved_cluster = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    if saved_resolve is not None:
        services.resolve_ip_for_localhost = lambda host: host
    if local_cluster and saved_cluster is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False  # node IP: localhost
    try:
        yield
    finally:
        if saved_resolve is not None:
            services.resolve_ip_for_localhost = saved_resolve
        if saved_cluster is not None:
            ray_constants.ENABLE_RAY_CLUSTER = saved_cluster


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    """Fail fast when nothing listens at ``HOST:PORT`` (Ray itself retries for long)."""
    try:
        addr = Address.parse(address)
    except ConfigError:
        return  # not HOST:PORT (ray://..., a hostname Ray resolves): let Ray decide
    if addr.is_unix or not addr.port:
        return
    try:
        with socket.create_connection((addr.host, addr.port), timeout=timeout):
            pass
    except OSError as e:
        raise BackendNotAvailableError(
            f"cannot reach the Ray cluster at {address}: {e.strerror or e}; start one with "
            "`ray start --head --node-ip-address=...` or set `ray: {address: local}`"
        ) from None


def connect(address: str | None, temp_dir: Path | None = None) -> tuple[Any, bool]:
    """Connect this process to Ray (once); returns (ray, whether this call connected).

    ``temp_dir``: for ``local``, where the cluster keeps its sessions (logs, sockets)
    instead of ``/tmp/ray``, if short enough for its socket paths.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    target = address or "auto"
    local = target == "local"
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if local:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if not any(os.environ.get(v) for v in _AUTH_VARS):
            # Ray (>= 2.5x) gives a new local cluster token auth and would write the
            # token to ~/.ray/auth_token; a per-farm token in the environment instead
            os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        kwargs.update(
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
        )
        if temp_dir is not None and len(str(temp_dir)) <= MAX_TEMP_DIR_CHARS:
            kwargs["_temp_dir"] = str(temp_dir)
    else:
        _check_reachable(target)
    try:
        with _keep_loopback(local_cluster=local):
            ray.init(address=target, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise BackendNotAvailableError(
            f"cannot connect to the Ray cluster (ray.address {target!r}): {e}"
        ) from None
    return ray, True


def ray_address(spec: FarmSpec | None) -> str | None:
    """The one Ray address of a spec's ray groups (the spec validator made them agree)."""
    if spec is None:
        return None
    for g in spec.sandboxes:
        if g.backend == "ray" and g.ray is not None and g.ray.address:
            return g.ray.address
    return spec.ray.address if spec.ray is not None else None


def placement(
    group: SandboxGroup, farm_resources: dict[str, float] | None, cluster: dict[str, float]
) -> dict[str, Any]:
    """The actor options that place a sandbox of ``group`` (see the module docstring)."""
    opts: dict[str, Any] = {"num_cpus": group.limits.cpus if group.limits.cpus else 1}
    if group.limits.memory_mb:
        opts["memory"] = group.limits.memory_mb * 1024 * 1024
    if group.ray is not None and group.ray.resources is not None:
        resources = dict(group.ray.resources)
    elif farm_resources is not None:
        resources = dict(farm_resources)
    elif f"farm_{group.kind}" in cluster:
        resources = {f"farm_{group.kind}": 1}
    else:
        resources = {}
    if resources:
        opts["resources"] = resources
    return opts


# the actor (runs on any node) ----------------------------------------------


class RaySandboxProcess(LocalSandboxProcess):
    """``farm serve`` for one sandbox in a Ray actor: dies with the actor's worker."""

    def __init__(self, group: SandboxGroup, address: str, allow_remote: bool) -> None:
        super().__init__(group, address, Path(os.devnull))
        self._log_path = os.path.join(self._tmp.name, "log")  # on the actor's node
        if allow_remote:
            self._args.append("--allow-remote")

    def command(self, ready_file: str) -> list[str]:
        cmd = super().command(ready_file)
        return [sys.executable, "-S", _PDEATHSIG_EXEC, str(os.getpid()), "--", *cmd]


class SandboxActor:
    """The body of a sandbox's Ray actor (wrapped with ``ray.remote`` by the backend)."""

    def __init__(self, sandbox_id: str, group: SandboxGroup) -> None:
        self.sandbox_id = sandbox_id
        self.group = group
        self.proc: RaySandboxProcess | None = None
        self._exited = threading.Event()
        self._code: int | None = None

    def node(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    def start(self) -> dict[str, Any]:
        """Start ``farm serve`` on this node's IP; returns its endpoint and pid."""
        import ray

        ip = ray.util.get_node_ip_address()
        loopback = ipaddress.ip_address(ip).is_loopback
        host = f"[{ip}]" if ":" in ip else ip
        self.proc = RaySandboxProcess(self.group, f"{host}:0", allow_remote=not loopback)
        started = threading.Event()
        failure: list[BaseException] = []

        def own() -> None:
            # PR_SET_PDEATHSIG follows the thread that forked the child: this one
            # stays until the child exits, so only the worker's death ends it early
            assert self.proc is not None
            try:
                self.proc.start()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                failure.append(e)
                started.set()
                self._exited.set()
                return
            started.set()
            assert self.proc.proc is not None
            self._code = self.proc.proc.wait()
            self._exited.set()

        threading.Thread(target=own, name="farm-serve-owner", daemon=True).start()
        started.wait()
        if failure:
            err = failure[0]
            raise SandboxUnavailableError(str(err.args[0] if err.args else err)) from None
        return {"endpoint": self.proc.address, "pid": self.proc.pid}

    def wait_exit(self) -> str:
        """Block until ``farm serve`` ends; returns why."""
        self._exited.wait()
        return f"farm serve {describe_exit(self._code)}"

    def usage(self) -> tuple[float | None, int | None]:
        import psutil

        if self.proc is None or self.proc.proc is None:
            return None, None
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None, None
        rss = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
        return rss / (1 << 20), len(procs)

    def stop(self, grace_s: float) -> int | None:
        if self.proc is None or self.proc.proc is None:
            return None
        return self.proc.stop(grace_s)


# the backend (in the controller) --------------------------------------------


@dataclass
class _Actor:
    name: str
    actor: Any
    node_id: str = ""
    node_ip: str = ""
    watch: Any = None
    ended: str | None = None
    usage_ref: Any = None
    usage: Usage = field(default_factory=Usage)


class RayBackend(Backend):
    """Sandboxes as Ray actors (see the module docstring)."""

    name = "ray"

    def __init__(self, state_dir: Path, spec: FarmSpec | None = None) -> None:
        super().__init__(state_dir)
        import_ray()  # a missing extra fails when the farm is made, before anything runs
        self.address = ray_address(spec)
        self.farm_resources = (
            spec.ray.resources if spec is not None and spec.ray is not None else None
        )
        self.namespace = namespace_for(state_dir)
        self._ray: Any = None
        self._connected_here = False
        self._actor_cls: Any = None
        self._live: dict[str, _Actor] = {}
        self._lock = threading.Lock()

    # connection -------------------------------------------------------------

    def _connect(self) -> Any:
        with self._lock:
            if self._ray is None or not self._ray.is_initialized():
                self._ray, self._connected_here = connect(self.address, self.state_dir / "ray")
                self._actor_cls = self._ray.remote(SandboxActor)
            return self._ray

    async def close(self) -> None:
        if self._ray is not None and self._connected_here:
            await asyncio.to_thread(self._ray.shutdown)
            self._ray = None
            # a local cluster's sessions stay (logs); its socket files must not
            for path in (self.state_dir / "ray").glob("session_*/sockets/*"):
                with contextlib.suppress(OSError):
                    path.unlink()

    # sandboxes -------------------------------------------------------------

    async def start(self, request: SandboxRequest) -> SandboxHandle:
        return await asyncio.to_thread(self._start, request)

    def _start(self, request: SandboxRequest) -> SandboxHandle:
        ray = self._connect()
        group = request.group
        name = f"{request.sandbox_id}.{request.incarnation}"
        opts = placement(group, self.farm_resources, ray.cluster_resources())
        actor = self._actor_cls.options(
            name=name,
            namespace=self.namespace,
            lifetime="detached",
            max_restarts=0,
            max_concurrency=MAX_CONCURRENCY,
            **opts,
        ).remote(request.sandbox_id, group)
        entry = _Actor(name, actor)
        self._live[name] = entry
        try:
            try:
                where = ray.get(actor.node.remote(), timeout=group.startup_timeout_s)
            except ray.exceptions.GetTimeoutError:
                raise SandboxStartError(
                    f"sandbox {request.sandbox_id} ({group.env}): no Ray node took its actor "
                    f"within {group.startup_timeout_s:g} s; it needs {_needs(opts)}; the "
                    f"cluster has free {_fmt(ray.available_resources())} of "
                    f"{_fmt(ray.cluster_resources())}"
                ) from None
            except ray.exceptions.RayError as e:  # e.g. farm is not installed on that node
                raise SandboxStartError(
                    f"sandbox {request.sandbox_id} ({group.env}): its Ray actor failed to "
                    f"start: {_tail(str(e))}"
                ) from None
            entry.node_id, entry.node_ip = where["node_id"], where["node_ip"]
            try:
                started = ray.get(actor.start.remote(), timeout=group.startup_timeout_s + 10)
            except ray.exceptions.GetTimeoutError:
                raise SandboxStartError(
                    f"sandbox {request.sandbox_id} ({group.env}) did not start on node "
                    f"{entry.node_ip} within {group.startup_timeout_s + 10:g} s"
                ) from None
            except ray.exceptions.RayError as e:
                cause = getattr(e, "cause", None)  # a RayTaskError's original exception
                raise SandboxStartError(
                    f"sandbox {request.sandbox_id} ({group.env}) did not start on node "
                    f"{entry.node_ip}: {_tail(str(cause) if cause else _ray_cause(e))}"
                ) from None
        except BaseException:
            self._kill(entry)
            raise
        entry.watch = actor.wait_exit.remote()
        log.info(
            "%s: actor %s on node %s (%s), endpoint %s",
            request.sandbox_id,
            name,
            entry.node_id[:12],
            entry.node_ip,
            started["endpoint"],
        )
        return SandboxHandle(
            request.sandbox_id,
            request.incarnation,
            self.name,
            started["endpoint"],
            started["pid"],
            entry,
        )

    def _kill(self, entry: _Actor) -> None:
        """Kill the actor (its server dies with it) and wait until Ray says it is gone."""
        ray = self._ray
        with contextlib.suppress(Exception):
            ray.kill(entry.actor, no_restart=True)
        self._wait_gone(entry.name)
        self._live.pop(entry.name, None)

    def _wait_gone(self, name: str) -> None:
        ray = self._ray
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                return
            except Exception:  # noqa: BLE001 - the GCS is unreachable: nothing to wait for
                return
            time.sleep(0.05)
        log.warning("Ray still lists actor %s %g s after it was killed", name, STOP_WAIT_S)

    async def stop(self, handle: SandboxHandle, grace_s: float = 5.0) -> None:
        entry: _Actor = handle.detail

        def stop() -> None:
            ray = self._ray
            if entry.ended is None and self.exit_reason(handle) is None:
                with contextlib.suppress(Exception):  # a graceful stop of the server first
                    ray.get(entry.actor.stop.remote(grace_s), timeout=grace_s + 10)
            self._kill(entry)

        await asyncio.to_thread(stop)

    def exit_reason(self, handle: SandboxHandle) -> str | None:
        entry: _Actor = handle.detail
        if entry.ended is not None:
            return entry.ended
        ray = self._ray
        ready, _ = ray.wait([entry.watch], timeout=0, fetch_local=True)
        if not ready:
            return None
        try:
            why = ray.get(entry.watch, timeout=1)
            entry.ended = f"{why} on node {entry.node_ip}"
        except ray.exceptions.ActorUnavailableError:
            entry.watch = entry.actor.wait_exit.remote()  # unreachable for now: ask again
            return None
        except ray.exceptions.RayError as e:
            entry.ended = f"its Ray actor died on node {entry.node_ip}: {_ray_cause(e)}"
        return entry.ended

    def usage(self, handle: SandboxHandle) -> Usage:
        """The last resource use the actor reported (asked again without waiting)."""
        entry: _Actor = handle.detail
        ray = self._ray
        if entry.usage_ref is not None:
            ready, _ = ray.wait([entry.usage_ref], timeout=0)
            if ready:
                with contextlib.suppress(Exception):
                    mem, pids = ray.get(entry.usage_ref, timeout=1)
                    entry.usage = Usage(memory_mb=mem, pids=pids)
                entry.usage_ref = None
        if entry.usage_ref is None and entry.ended is None:
            entry.usage_ref = entry.actor.usage.remote()
        return entry.usage

    # orphans --------------------------------------------------------------

    def list_orphans(self) -> list[Orphan]:
        ray = self._connect()
        orphans = []
        for item in ray.util.list_named_actors(all_namespaces=True):
            if item["namespace"] != self.namespace or item["name"] in self._live:
                continue
            name = item["name"]
            orphans.append(
                Orphan(
                    name.rsplit(".", 1)[0],
                    self.name,
                    "",
                    f"Ray actor {name} in namespace {self.namespace}",
                    {"name": name, "namespace": self.namespace},
                )
            )
        return orphans

    def remove_orphan(self, orphan: Orphan) -> None:
        ray = self._connect()
        name = orphan.detail["name"]
        try:
            actor = ray.get_actor(name, namespace=orphan.detail["namespace"])
        except ValueError:
            return  # gone already
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
        self._wait_gone(name)


def _ray_cause(e: BaseException) -> str:
    """The informative part of a Ray error (its last lines)."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _fmt(resources: dict[str, float]) -> str:
    keep = {k: v for k, v in resources.items() if not k.startswith("node:")}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(keep.items())) + "}"


def _needs(opts: dict[str, Any]) -> str:
    needs = {"CPU": float(opts["num_cpus"]), **opts.get("resources", {})}
    if "memory" in opts:
        needs["memory"] = float(opts["memory"])
    return _fmt(needs)


# a loopback cluster (tests, benchmarks) ---------------------------------------

_RAY_START = """
import sys
from ray._private import services
services.resolve_ip_for_localhost = lambda host: host
from ray.scripts.scripts import main
sys.argv = ["ray", *sys.argv[1:]]
main()
"""


def start_loopback_node(*args: str, head: bool = False, timeout: float = 120.0) -> None:
    """``ray start ARGS`` for a node on ``--node-ip-address=127.0.0.1`` that stays there.

    Ray 2.x rewrites a loopback node address to the host's routable one (and a head
    would then bind its servers there); this keeps 127.0.0.1. For a head, the
    node IP Ray picks for itself is loopback too (a second node refuses that
    setting, and needs none). Raises :class:`RuntimeError` with Ray's output.
    """
    import subprocess

    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    if head:
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    proc = subprocess.run(
        [sys.executable, "-c", _RAY_START, "start", "--node-ip-address=127.0.0.1", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"ray start failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def cluster_processes(temp_dir: str) -> list[Any]:
    """The processes of the cluster whose ``--temp-dir`` is ``temp_dir``, and descendants."""
    import psutil

    found: dict[int, Any] = {}
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(temp_dir in part for part in p.info["cmdline"] or []):
                found[p.pid] = p
                found.update((c.pid, c) for c in p.children(recursive=True))
    return list(found.values())


def stop_cluster(temp_dir: str) -> list[Any]:
    """``ray stop``, then SIGKILL whatever of the cluster in ``temp_dir`` is left;
    returns the processes still there after 10 s (none, normally)."""
    import subprocess

    import psutil

    ray_cli = str(Path(sys.executable).with_name("ray"))
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([ray_cli, "stop", "--grace-period=5"], capture_output=True, timeout=60)
    for p in cluster_processes(temp_dir):
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(cluster_processes(temp_dir), timeout=10)
    return cluster_processes(temp_dir)
