"""The docker backend: each sandbox is a container of the kind's image.

* image: ``farm-<kind>:latest`` (built by ``farm images build``; see
  ``sandbox_images/README.md``); its entrypoint is ``farm serve`` on the unix
  socket ``/run/farm/farm.sock``, writing ``/run/farm/ready`` once it serves;
* endpoint: the host directory ``<state_dir>/run/<id>.<incarnation>/`` is
  mounted at ``/run/farm``, so the endpoint is ``unix://<that dir>/farm.sock``
  (a new path per incarnation, like the local backend's);
* isolation: ``network_mode="none"`` (no interface but loopback), every
  capability dropped (``cap_drop=["ALL"]``; no kind needs one back: Chromium runs
  with ``--no-sandbox`` because the container is the sandbox, Xvfb and the
  desktop apps need none; android gets the device ``/dev/kvm`` and its group,
  for the emulator, and waits for its cold boot: ``startup_timeout_s`` defaults
  to 600 s for android), ``no-new-privileges``, a read-only root with tmpfs
  scratch at ``/tmp`` and ``$HOME`` (``/home/farm``), a non-root user (the
  caller's uid, or 10001 when the caller is root), and docker's init (tini) as
  PID 1 to reap zombies;
* limits (:class:`orchestration.spec.Limits`): ``memory_mb`` -> the cgroup memory
  limit (no swap; the kernel OOM-kills, ``exit_reason`` says ``OOMKilled``),
  ``pids`` -> the cgroup pids limit, ``cpus`` -> ``nano_cpus`` (CFS quota);
  ``address_space_mb`` is not applied (no per-process rlimit inside);
* labels ``farm.state_dir``, ``farm.sandbox_id``, ``farm.incarnation``,
  ``farm.controller_pid``: :meth:`DockerBackend.list_orphans` finds the containers
  of this state dir whose controller is gone;
* exit: a thread follows the daemon's ``die``/``oom`` events for this state
  dir, so :meth:`DockerBackend.exit_reason` (polled 10 times a second per
  sandbox) asks the daemon only after an event, or every few seconds as a backstop;
* output: on stop the container's log is saved to ``<state_dir>/logs/<id>.log``
  (the previous incarnation's in ``<id>.prev.log``).

Needs the ``docker`` extra (``pip install 'farm[docker]'``) and a daemon
(``scripts/start-dockerd`` starts one).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from orchestration.backends.base import Backend, Orphan, SandboxHandle, SandboxRequest, Usage
from orchestration.errors import BackendNotAvailableError, SandboxStartError
from orchestration.spec import SandboxGroup

IMAGE_PREFIX = "farm-"
IMAGE_TAG = "latest"
MOUNT = "/run/farm"
SOCKET_NAME = "farm.sock"
READY_NAME = "ready"
HOME = "/home/farm"
ROOT_UID = 10001  # the user sandboxes run as when the controller runs as root
LABEL_STATE_DIR = "farm.state_dir"
LABEL_SANDBOX = "farm.sandbox_id"
LABEL_INCARNATION = "farm.incarnation"
LABEL_CONTROLLER = "farm.controller_pid"
TMPFS_MB = {"toy": 64, "browser": 512, "desktop": 256, "android": 512}
SHM_MB = {"browser": 512, "desktop": 256, "android": 512}  # Chromium, X, the emulator
KVM = "/dev/kvm"
#: an android container cold-boots its emulator and saves a snapshot before it serves
ANDROID_STARTUP_S = 600.0
EXTRA_TMPFS = {"desktop": ["/var/lib/xkb"]}  # Xvfb writes its compiled keymaps there
CAP_ADD: dict[str, list[str]] = {"toy": [], "browser": [], "desktop": [], "android": []}
BACKSTOP_POLL_S = 3.0


def image_name(kind: str) -> str:
    """The image a sandbox of ``kind`` runs: ``farm-toy:latest``."""
    return f"{IMAGE_PREFIX}{kind}:{IMAGE_TAG}"


def kvm_state() -> str:
    """``/dev/kvm present``, or what is wrong with it (for android error messages)."""
    if not os.path.exists(KVM):
        return "no /dev/kvm"
    if not os.access(KVM, os.R_OK | os.W_OK):
        return f"/dev/kvm present but not read/write for uid {os.getuid()}"
    return "/dev/kvm present"


def startup_timeout(group: SandboxGroup) -> float:
    """The group's ``startup_timeout_s``; for android, at least a cold boot unless set."""
    if group.kind == "android" and "startup_timeout_s" not in group.model_fields_set:
        return max(group.startup_timeout_s, ANDROID_STARTUP_S)
    return group.startup_timeout_s


def docker_sdk() -> Any:
    """The ``docker`` package, or a clear error naming the extra."""
    try:
        import docker
    except ImportError:
        raise BackendNotAvailableError(
            "the docker backend needs the docker Python SDK: pip install 'farm[docker]'"
        ) from None
    return docker


def docker_client(timeout: float = 60.0) -> Any:
    """A client of the local daemon, or a clear error when none answers."""
    docker = docker_sdk()
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as e:  # noqa: BLE001 - DockerException, connection errors
        raise BackendNotAvailableError(
            f"no Docker daemon answers ({_short(e)}); start one with scripts/start-dockerd "
            "(or `dockerd --bridge=none --iptables=false &` as root)"
        ) from None
    return client


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[-1][:300] if text else type(e).__name__


class _Container:
    """The backend's own part of a handle."""

    def __init__(self, container: Any, run_dir: Path, kind: str) -> None:
        self.container = container
        self.id: str = container.id
        self.run_dir = run_dir
        self.kind = kind
        self.state: dict[str, Any] | None = None  # the last State seen once it ended
        self.checked_at = time.monotonic()
        self.usage: Usage = Usage()
        self.usage_at = 0.0


def describe_state(state: dict[str, Any], memory_mb: int | None = None) -> str:
    """Why a container ended, from its inspected ``State``."""
    code = state.get("ExitCode")
    if state.get("OOMKilled"):
        limit = f", limit {memory_mb} MB" if memory_mb else ""
        return f"killed: out of memory (OOMKilled{limit})"
    if isinstance(code, int) and code > 128:
        import signal

        try:
            return f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            return f"killed by signal {code - 128}"
    if state.get("Error"):
        return f"container error: {state['Error']}"
    return f"exited with code {code}"


class DockerBackend(Backend):
    """Sandboxes as containers (see the module docstring)."""

    name = "docker"

    def __init__(self, state_dir: Path, client: Any = None) -> None:
        super().__init__(state_dir)
        self.run_dir = state_dir / "run"
        self.log_dir = state_dir / "logs"
        self._client = client
        self._died: set[str] = set()
        self._died_lock = threading.Lock()
        self._events: Any = None
        self._events_thread: threading.Thread | None = None
        self._checked_images: set[str] = set()

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client

    # events ------------------------------------------------------------------

    def _follow_events(self) -> None:
        if self._events_thread is not None and self._events_thread.is_alive():
            return
        try:
            self._events = self.client.events(
                decode=True,
                filters={
                    "type": "container",
                    "event": ["die", "oom"],
                    "label": f"{LABEL_STATE_DIR}={self.state_dir}",
                },
            )
        except Exception:  # noqa: BLE001 - the backstop poll covers it
            self._events = None
            return
        events = self._events

        def run() -> None:
            with contextlib.suppress(Exception):
                for event in events:
                    cid = event.get("id") or event.get("Actor", {}).get("ID")
                    if cid:
                        with self._died_lock:
                            self._died.add(cid)

        self._events_thread = threading.Thread(target=run, name="farm-docker-events", daemon=True)
        self._events_thread.start()

    # start / stop ------------------------------------------------------------

    def _user(self, run_dir: Path) -> str:
        uid, gid = os.getuid(), os.getgid()
        if uid == 0:
            uid = gid = ROOT_UID
            os.chown(run_dir, uid, gid)
        return f"{uid}:{gid}"

    def _check_image(self, kind: str) -> str:
        image = image_name(kind)
        if image in self._checked_images:
            return image
        docker = docker_sdk()
        kvm = kvm_state() if kind == "android" else None
        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            if kind == "android":
                raise SandboxStartError(
                    f"no image {image} for android sandboxes; build it with `farm images build "
                    "--kind android` on a machine that can download the Android SDK (the build "
                    "fetches the command-line tools, the emulator and a system image from "
                    f"dl.google.com), or `docker load` one built elsewhere; KVM here: {kvm}"
                ) from None
            raise SandboxStartError(
                f"no image {image} for {kind} sandboxes; build it with "
                f"`farm images build --kind {kind}`"
            ) from None
        if kind == "android" and kvm != "/dev/kvm present":
            raise SandboxStartError(
                f"android sandboxes run an emulator that needs KVM, and this docker host has "
                f"none ({kvm}); enable hardware virtualisation (bare metal or nested) and load "
                "kvm_intel or kvm_amd"
            )
        self._checked_images.add(image)
        return image

    def container_kwargs(self, request: SandboxRequest, run_dir: Path) -> dict[str, Any]:
        """The ``containers.run`` arguments for ``request`` (security options, limits)."""
        group: SandboxGroup = request.group
        kind = group.kind
        lim = group.limits
        tmp_mb = TMPFS_MB.get(kind, 64)
        command = [
            group.env,
            *group.server.args(),
            "--env-kwargs",
            _json(group.env_kwargs),
        ]
        kwargs: dict[str, Any] = {
            "command": command,
            "name": f"farm-{_slug(self.state_dir)}-{request.sandbox_id}-{request.incarnation}",
            "detach": True,
            "init": True,
            "network_mode": "none",
            "cap_drop": ["ALL"],
            "cap_add": CAP_ADD.get(kind, []) or None,
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": {
                "/tmp": f"rw,nosuid,nodev,size={tmp_mb}m,mode=1777",
                HOME: f"rw,nosuid,nodev,size={tmp_mb}m,mode=1777",
                **{d: "rw,nosuid,nodev,size=16m,mode=1777" for d in EXTRA_TMPFS.get(kind, [])},
            },
            "volumes": {str(run_dir): {"bind": MOUNT, "mode": "rw"}},
            "environment": {"HOME": HOME, "PYTHONUNBUFFERED": "1", **group.environ},
            "user": self._user(run_dir),
            "labels": {
                LABEL_STATE_DIR: str(self.state_dir),
                LABEL_SANDBOX: request.sandbox_id,
                LABEL_INCARNATION: str(request.incarnation),
                LABEL_CONTROLLER: str(os.getpid()),
                "farm.kind": kind,
            },
        }
        if kind in SHM_MB:
            kwargs["shm_size"] = f"{SHM_MB[kind]}m"
        if kind == "android":
            # the emulator needs KVM: the device, and its group for the non-root user
            kwargs["devices"] = [f"{KVM}:{KVM}:rwm"]
            with contextlib.suppress(OSError):
                kwargs["group_add"] = [str(os.stat(KVM).st_gid)]
        if lim.memory_mb is not None:
            kwargs["mem_limit"] = f"{lim.memory_mb}m"
            kwargs["memswap_limit"] = f"{lim.memory_mb}m"  # no swap
        if lim.pids is not None:
            kwargs["pids_limit"] = lim.pids
        if lim.cpus is not None:
            kwargs["nano_cpus"] = int(lim.cpus * 1e9)
        return kwargs

    async def start(self, request: SandboxRequest) -> SandboxHandle:
        docker = docker_sdk()
        await asyncio.to_thread(self._follow_events)
        image = await asyncio.to_thread(self._check_image, request.group.kind)
        run_dir = self.run_dir / f"{request.sandbox_id}.{request.incarnation}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        kwargs = self.container_kwargs(request, run_dir)
        with contextlib.suppress(docker.errors.NotFound):  # a leftover of the same name
            await asyncio.to_thread(self.client.containers.get(kwargs["name"]).remove, force=True)
        try:
            container = await asyncio.to_thread(self.client.containers.run, image, **kwargs)
        except docker.errors.APIError as e:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise SandboxStartError(
                f"sandbox {request.sandbox_id} ({request.group.env}): docker could not start "
                f"a container of {image}: {_short(e)}"
            ) from None
        detail = _Container(container, run_dir, request.group.kind)
        handle = SandboxHandle(
            request.sandbox_id,
            request.incarnation,
            self.name,
            f"unix://{run_dir / SOCKET_NAME}",
            None,
            detail,
        )
        ready = run_dir / READY_NAME
        startup_s = startup_timeout(request.group)
        deadline = time.monotonic() + startup_s
        while not ready.exists():
            ended = await asyncio.to_thread(self._ended_state, detail)
            if ended is not None or time.monotonic() > deadline:
                why = (
                    describe_state(ended, request.group.limits.memory_mb)
                    if ended is not None
                    else f"not serving after {startup_s:g} s"
                )
                logs = await asyncio.to_thread(self._logs, detail)
                await self.stop(handle, grace_s=0)
                raise SandboxStartError(
                    f"sandbox {request.sandbox_id} ({request.group.env}) did not start in "
                    f"docker ({why}): {_tail(logs)}"
                )
            await asyncio.sleep(0.05)
        with contextlib.suppress(Exception):
            container.reload()
            handle.pid = container.attrs["State"].get("Pid") or None
        return handle

    async def stop(self, handle: SandboxHandle, grace_s: float = 5.0) -> None:
        await asyncio.to_thread(self._stop_sync, handle.sandbox_id, handle.detail, grace_s)

    def _stop_sync(self, sandbox_id: str, detail: _Container, grace_s: float) -> None:
        docker = docker_sdk()
        c = detail.container
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            if grace_s > 0:
                c.stop(timeout=max(1, round(grace_s)))
        self._save_log(sandbox_id, self._logs(detail))
        with contextlib.suppress(docker.errors.NotFound):
            try:
                c.remove(force=True)
            except docker.errors.APIError as e:
                if "already in progress" not in str(e):
                    raise
        with self._died_lock:
            self._died.discard(detail.id)
        shutil.rmtree(detail.run_dir, ignore_errors=True)

    def _logs(self, detail: _Container) -> str:
        try:
            return detail.container.logs(stdout=True, stderr=True).decode(errors="replace")
        except Exception:  # noqa: BLE001 - gone already
            return ""

    def _save_log(self, sandbox_id: str, text: str) -> None:
        if not text:
            return
        with contextlib.suppress(OSError):
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = self.log_dir / f"{sandbox_id}.log"
            if log.exists():
                os.replace(log, self.log_dir / f"{sandbox_id}.prev.log")
            log.write_text(text)

    # watching ------------------------------------------------------------------

    def _ended_state(self, detail: _Container) -> dict[str, Any] | None:
        """The container's State if it is no longer running, else None."""
        docker = docker_sdk()
        detail.checked_at = time.monotonic()
        try:
            detail.container.reload()
        except docker.errors.NotFound:
            return {"Error": "the container was removed", "ExitCode": None}
        except Exception:  # noqa: BLE001 - daemon hiccup: look again later
            return None
        state = detail.container.attrs.get("State", {})
        if state.get("Running") or state.get("Status") in ("created", "running", "restarting"):
            return None
        return state

    def exit_reason(self, handle: SandboxHandle) -> str | None:
        detail: _Container = handle.detail
        if detail.state is None:
            with self._died_lock:
                event = detail.id in self._died
            if not event and time.monotonic() - detail.checked_at < BACKSTOP_POLL_S:
                return None
            detail.state = self._ended_state(detail)
            if detail.state is None:
                return None
        return describe_state(detail.state, _memory_limit(detail))

    def usage(self, handle: SandboxHandle) -> Usage:
        """From a one-shot stats call, at most every 5 s (the kernel enforces the limits)."""
        detail: _Container = handle.detail
        if time.monotonic() - detail.usage_at < 5.0:
            return detail.usage
        detail.usage_at = time.monotonic()
        try:
            stats = detail.container.stats(stream=False, one_shot=True)
        except Exception:  # noqa: BLE001
            return detail.usage
        mem = stats.get("memory_stats") or {}
        used = mem.get("usage")
        inner = mem.get("stats") or {}
        cache = inner.get("total_inactive_file", inner.get("inactive_file", 0)) or 0
        pids = (stats.get("pids_stats") or {}).get("current")
        detail.usage = Usage(
            memory_mb=None if used is None else max(0, used - cache) / (1 << 20), pids=pids
        )
        return detail.usage

    # orphans -----------------------------------------------------------------

    def list_orphans(self) -> list[Orphan]:
        from orchestration.backends.local import _alive

        containers = self.client.containers.list(
            all=True, filters={"label": f"{LABEL_STATE_DIR}={self.state_dir}"}
        )
        orphans = []
        for c in containers:
            labels = c.labels or {}
            try:
                controller = int(labels.get(LABEL_CONTROLLER, ""))
            except ValueError:
                controller = None
            if controller is not None and controller != os.getpid() and _alive(controller):
                continue  # another live controller's sandbox
            sid = labels.get(LABEL_SANDBOX, c.name)
            inc = labels.get(LABEL_INCARNATION, "?")
            run_dir = self.run_dir / f"{sid}.{inc}"
            orphans.append(
                Orphan(
                    sid,
                    self.name,
                    f"unix://{run_dir / SOCKET_NAME}",
                    f"container {c.name} ({c.status})",
                    {"container": c, "run_dir": run_dir},
                )
            )
        return orphans

    def remove_orphan(self, orphan: Orphan) -> None:
        docker = docker_sdk()
        with contextlib.suppress(docker.errors.NotFound):
            orphan.detail["container"].remove(force=True)
        shutil.rmtree(orphan.detail["run_dir"], ignore_errors=True)

    async def close(self) -> None:
        if self._events is not None:
            with contextlib.suppress(Exception):
                self._events.close()
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()


def orphan_backend(state_dir: Path) -> DockerBackend | None:
    """A backend to look for docker orphans with, or None (no SDK, no daemon answering)."""
    try:
        docker = docker_sdk()
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception:  # noqa: BLE001 - no docker here: no docker orphans either
        return None
    return DockerBackend(state_dir, client)


def _memory_limit(detail: _Container) -> int | None:
    limit = (detail.container.attrs.get("HostConfig") or {}).get("Memory") or 0
    return limit >> 20 or None


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _slug(path: Path) -> str:
    """A short stable token of the state dir, so two farms' container names never clash."""
    import hashlib

    return hashlib.sha1(str(path).encode()).hexdigest()[:8]


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"
