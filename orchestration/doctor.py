"""Host checks for each sandbox kind and backend (``farm doctor``).

Each :class:`Check` says what it looked for, whether it is there, and what to
install when it is not. Nothing here starts a sandbox or reaches the network
(the Docker check talks to the daemon's unix socket).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    target: str  # a kind (toy, browser, ...) or a backend (backend:docker)
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _module(target: str, module: str, extra: str) -> Check:
    found = importlib.util.find_spec(module) is not None
    return Check(
        target,
        f"python: {module}",
        found,
        "importable" if found else "not installed",
        "" if found else f".venv/bin/pip install -e '.[{extra}]'",
    )


def _binary(target: str, name: str, candidates: tuple[str, ...], fix: str) -> Check:
    for c in candidates:
        path = c if os.path.isabs(c) else shutil.which(c)
        if path and os.access(path, os.X_OK):
            return Check(target, name, True, path)
    return Check(target, name, False, f"none of {', '.join(candidates)} found", fix)


def _chromium() -> Check:
    return _binary(
        "browser",
        "Chromium",
        ("/usr/bin/chromium", "chromium", "chromium-browser"),
        "apt-get install chromium (Debian's Chromium; scripts/bootstrap does it)",
    )


def _headless_shell() -> Check:
    return _binary(
        "browser",
        "Chromium headless shell",
        ("/usr/lib/chromium/chromium-headless-shell",),
        "apt-get install chromium-headless-shell (headless sandboxes use it: a fresh "
        "context costs about a quarter of the full browser's CPU; scripts/bootstrap does it)",
    )


def _kvm() -> Check:
    path = "/dev/kvm"
    if not os.path.exists(path):
        return Check(
            "android",
            "/dev/kvm",
            False,
            "missing",
            "enable hardware virtualisation (bare metal or nested virt) and load kvm_intel/kvm_amd",
        )
    if not os.access(path, os.R_OK | os.W_OK):
        return Check("android", "/dev/kvm", False, "not accessible", "add your user to group kvm")
    return Check("android", "/dev/kvm", True, "read/write")


def _sdk_root() -> str:
    return (
        os.environ.get("ANDROID_SDK_ROOT") or os.environ.get("ANDROID_HOME") or "/opt/android-sdk"
    )


def _android_emulator() -> Check:
    sdk = _sdk_root()
    found = next(
        (
            p
            for p in (os.path.join(sdk, "emulator", "emulator"), shutil.which("emulator"))
            if p and os.access(p, os.X_OK)
        ),
        None,
    )
    if found:
        return Check("android", "Android emulator (local backend)", True, found)
    return Check(
        "android",
        "Android emulator (local backend)",
        False,
        f"no Android SDK emulator (ANDROID_SDK_ROOT={sdk}: no emulator/emulator; none on PATH)",
        "local android sandboxes need the SDK: its command-line tools, then `sdkmanager "
        "emulator platform-tools 'system-images;android-34;google_apis;x86_64'` (downloads "
        "from dl.google.com); the docker backend's farm-android image brings its own",
    )


def _android_system_image() -> Check:
    images = os.path.join(_sdk_root(), "system-images")
    found = sorted(
        os.path.relpath(root, images)
        for root, _dirs, files in os.walk(images)
        if "system.img" in files
    )
    if found:
        return Check("android", "Android system image", True, ", ".join(found[:3]))
    return Check(
        "android",
        "Android system image",
        False,
        f"none under {images}",
        "sdkmanager 'system-images;android-34;google_apis;x86_64' (needs internet), "
        "then avdmanager create avd; or use the farm-android image",
    )


def _docker_get(path: str) -> tuple[int | None, str]:
    """(HTTP status, first line) of ``GET path`` on the local Docker daemon, or (None, why)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None, f"DOCKER_HOST={host} is not a unix socket"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(3.0)
            s.connect(host.removeprefix("unix://"))
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
            reply = s.recv(4096).decode(errors="replace")
    except OSError as e:
        return None, f"no Docker daemon answers ({e.strerror or e})"
    first = reply.split("\r\n", 1)[0]
    try:
        return int(first.split()[1]), first
    except (IndexError, ValueError):
        return None, f"unexpected reply {first!r}"


def _android_image() -> Check:
    name = "image farm-android:latest (docker backend)"
    status, detail = _docker_get("/images/farm-android:latest/json")
    if status == 200:
        return Check("android", name, True, "present")
    build = (
        "farm images build --kind android, on a machine with internet access (the build "
        "downloads the Android SDK, emulator and a system image); or docker load one"
    )
    if status == 404:
        return Check("android", name, False, "not built", build)
    return Check("android", name, False, f"cannot tell: {detail}", build)


def _docker_daemon() -> Check:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return Check(
            "backend:docker", "Docker daemon", False, f"DOCKER_HOST={host} is not a unix socket", ""
        )
    path = host.removeprefix("unix://")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(3.0)
            s.connect(path)
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = s.recv(4096).decode(errors="replace")
    except OSError as e:
        return Check(
            "backend:docker",
            "Docker daemon",
            False,
            f"{path}: {e.strerror or e}",
            "apt-get install docker.io and start dockerd (dockerd --bridge=none --iptables=false)",
        )
    ok = reply.split("\r\n", 1)[0].endswith("200 OK")
    return Check(
        "backend:docker",
        "Docker daemon",
        ok,
        f"{path}: {reply.splitlines()[0] if reply else 'no reply'}",
    )


CHECKS: dict[str, list[Callable[[], Check]]] = {
    "toy": [lambda: _module("toy", "gymnasium", "dev")],
    "browser": [
        _chromium,
        _headless_shell,
        lambda: _module("browser", "playwright", "browser"),
        lambda: _module("browser", "miniwob", "browser"),
    ],
    "desktop": [
        lambda: _binary("desktop", "Xvfb", ("Xvfb",), "apt-get install xvfb"),
        lambda: _module("desktop", "Xlib", "desktop"),
        lambda: _module("desktop", "mss", "desktop"),
    ],
    "android": [
        _kvm,
        lambda: _binary("android", "adb", ("adb",), "apt-get install adb"),
        lambda: _module("android", "adbutils", "android"),
        _android_emulator,
        _android_system_image,
        _android_image,
    ],
    "backend:docker": [
        lambda: _binary("backend:docker", "docker CLI", ("docker",), "apt-get install docker.io"),
        _docker_daemon,
        lambda: _module("backend:docker", "docker", "docker"),
    ],
    "backend:ray": [lambda: _module("backend:ray", "ray", "ray")],
}


def run_checks(targets: list[str] | None = None) -> list[Check]:
    """Every check of ``targets`` (kinds and ``backend:NAME``; default: all)."""
    return [check() for t in (targets or list(CHECKS)) for check in CHECKS.get(t, [])]
