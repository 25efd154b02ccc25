"""Android sandboxes in the orchestration layer: ``farm doctor``, the docker backend's
android containers, ``farm images build --kind android``, the image's entrypoint.

On this machine (``/dev/kvm`` present, no Android SDK, no way to download one, so no
``farm-android`` image) every path must refuse with a message naming exactly what is
missing. Where a ``farm-android`` image and KVM exist, the last test runs a farm of one
android sandbox on the docker backend and plays an oracle episode through it; here it
is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import farm_home_cli, write_spec

from orchestration.backends.base import SandboxRequest
from orchestration.backends.docker import DockerBackend, startup_timeout
from orchestration.spec import SandboxGroup

pytestmark = pytest.mark.android

ANDROID_DOCKER = {"kind": "android", "env": "android/settings-wifi", "backend": "docker"}


def _daemon() -> Any:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        return client
    except Exception:  # noqa: BLE001 - no SDK or no daemon
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fa-", dir="/tmp"))
    yield path
    farm_home_cli("down", home=path)
    shutil.rmtree(path, ignore_errors=True)


def _cli(*args: str, home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "FARM_HOME": str(home), "COLUMNS": "250", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "farm.cli", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _android_checks(home: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    r = _cli("doctor", "--json", home=home, env=env)
    return {c["name"]: c for c in json.loads(r.stdout) if c["target"] == "android"}


def test_doctor_says_precisely_what_android_lacks(home: Path, tmp_path: Path) -> None:
    sdk = tmp_path / "sdk"
    sdk.mkdir()
    checks = _android_checks(home, {"ANDROID_SDK_ROOT": str(sdk), "PATH": os.environ["PATH"]})
    kvm = checks["/dev/kvm"]
    assert kvm["ok"] == os.access("/dev/kvm", os.R_OK | os.W_OK)
    if not os.path.exists("/dev/kvm"):
        assert kvm["detail"] == "missing" and "virtualisation" in kvm["fix"]
    assert checks["adb"]["ok"] and checks["python: adbutils"]["ok"]  # bootstrap installs both
    emulator = checks["Android emulator (local backend)"]
    assert not emulator["ok"] and f"ANDROID_SDK_ROOT={sdk}" in emulator["detail"]
    assert "sdkmanager" in emulator["fix"] and "farm-android image" in emulator["fix"]
    system = checks["Android system image"]
    assert not system["ok"] and system["detail"] == f"none under {sdk}/system-images"
    image = checks["image farm-android:latest (docker backend)"]
    client = _daemon()
    has_image = client is not None and any(
        "farm-android:latest" in (i.tags or []) for i in client.images.list()
    )
    assert image["ok"] == has_image
    if client is not None and not has_image:
        assert image["detail"] == "not built" and "--kind android" in image["fix"]
        assert "internet" in image["fix"]

    # an SDK with an emulator and a system image: those two checks pass
    (sdk / "emulator").mkdir()
    (sdk / "emulator" / "emulator").write_text("#!/bin/sh\n")
    (sdk / "emulator" / "emulator").chmod(0o755)
    img = sdk / "system-images" / "android-34" / "google_apis" / "x86_64"
    img.mkdir(parents=True)
    (img / "system.img").write_bytes(b"")
    checks = _android_checks(home, {"ANDROID_SDK_ROOT": str(sdk)})
    assert checks["Android emulator (local backend)"]["ok"]
    assert checks["Android system image"] == {
        "target": "android",
        "name": "Android system image",
        "ok": True,
        "detail": "android-34/google_apis/x86_64",
        "fix": "",
    }


def test_doctor_with_an_android_docker_spec(home: Path) -> None:
    spec = write_spec(home, ANDROID_DOCKER)
    r = _cli("doctor", "-f", spec, "--json", home=home)
    targets = {c["target"] for c in json.loads(r.stdout)}
    assert targets == {"android", "backend:docker"}
    assert r.returncode == 1  # something android needs is missing here (the SDK at least)


def test_farm_up_android_on_docker_fails_precisely(home: Path) -> None:
    spec = write_spec(home, ANDROID_DOCKER, restart={"backoff_s": 0})
    r = _cli("up", "-f", spec, "--detach", home=home)
    client = _daemon()
    has_image = client is not None and any(
        "farm-android:latest" in (i.tags or []) for i in client.images.list()
    )
    if has_image:
        pytest.skip("this machine has a farm-android image: see test_android_farm_on_docker")
    assert r.returncode == 2, r.stderr
    if client is None:
        assert "no Docker daemon answers" in r.stderr or "docker Python SDK" in r.stderr
        return
    assert "no image farm-android:latest for android sandboxes" in r.stderr, r.stderr
    assert "farm images build --kind android" in r.stderr and "dl.google.com" in r.stderr
    kvm = "/dev/kvm present" if os.access("/dev/kvm", os.R_OK | os.W_OK) else "/dev/kvm"
    assert f"KVM here: {kvm}" in r.stderr or "KVM here: no /dev/kvm" in r.stderr
    assert client.containers.list(all=True, filters={"label": f"farm.state_dir={home}"}) == []


def test_images_build_android_refuses_where_the_sdk_cannot_be_downloaded(home: Path) -> None:
    port = _free_port()  # nothing listens: as unreachable as dl.google.com is from here
    url = f"https://127.0.0.1:{port}/commandlinetools-linux.zip"
    r = _cli("images", "build", "--kind", "toy,android", home=home,
             env={"FARM_ANDROID_SDK_URL": url})  # fmt: skip
    assert r.returncode == 2, r.stderr
    err = " ".join(r.stderr.split())
    assert (
        "farm-android cannot be built here" in err and f"127.0.0.1:{port} cannot be reached" in err
    )
    assert "internet access" in err and "docker save farm-android:latest" in err
    assert "farm-toy" not in r.stderr  # refused before anything was built
    r = _cli("images", "build", "--kind", "android,phone", home=home)
    assert r.returncode == 2 and "unknown kind phone" in r.stderr


def test_android_containers_get_kvm_and_a_boot_timeout(tmp_path: Path) -> None:
    group = SandboxGroup(**ANDROID_DOCKER)
    kwargs = DockerBackend(tmp_path).container_kwargs(
        SandboxRequest("android-0", 1, group), tmp_path
    )
    assert kwargs["devices"] == ["/dev/kvm:/dev/kvm:rwm"]
    if os.path.exists("/dev/kvm"):
        assert kwargs["group_add"] == [str(os.stat("/dev/kvm").st_gid)]
    assert kwargs["cap_drop"] == ["ALL"] and kwargs["network_mode"] == "none"
    assert kwargs["shm_size"] == "512m" and kwargs["read_only"] is True
    assert kwargs["command"][0] == "android/settings-wifi"
    assert startup_timeout(group) == 600.0  # a cold boot, unless the spec says otherwise
    assert startup_timeout(SandboxGroup(**ANDROID_DOCKER, startup_timeout_s=90)) == 90.0
    toy = SandboxGroup(kind="toy", env="toy/text-task", backend="docker")
    toy_kwargs = DockerBackend(tmp_path).container_kwargs(SandboxRequest("t", 1, toy), tmp_path)
    assert "devices" not in toy_kwargs and startup_timeout(toy) == 60.0


def test_the_image_entrypoint_says_what_it_lacks(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "ANDROID_SDK_ROOT": str(tmp_path / "sdk"),
        "FARM_ANDROID_AVD_TEMPLATE": str(tmp_path / "avd"),
    }
    r = subprocess.run(
        [sys.executable, "-m", "env_adapters.android.sandbox", "android/settings-wifi"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines[0] == "farm-android cannot start an emulator:"
    assert f"no Android emulator at {tmp_path}/sdk/emulator/emulator" in r.stderr
    assert f"no AVD 'farm' in {tmp_path}/avd" in r.stderr
    assert ("no /dev/kvm" in r.stderr) == (not os.path.exists("/dev/kvm"))


def test_android_farm_on_the_local_backend(home: Path, tmp_path: Path) -> None:
    """``farm up`` with an android group (local backend) serving a device: here the
    simulator through a private adb server; lease it, play an oracle episode, ``farm down``."""
    import farm
    from env_adapters.android import oracles
    from env_adapters.android.device import AdbServer
    from env_adapters.android.simulator import AdbDeviceSimulator
    from orchestration.client import FarmClient

    server = AdbServer(_free_port(), home=str(tmp_path / "adb"))
    with AdbDeviceSimulator() as sim:
        group = {
            "kind": "android",
            "env": "android/contacts-delete",
            "backend": "local",
            "env_kwargs": {
                "serial": sim.serial,
                "adb_port": server.port,
                "adb_home": server.home,
                "console_port": sim.console_port,
                "console_token": sim.console_token,
                "settle_ms": 0,
            },
        }
        spec = write_spec(home, group)
        try:
            up = _cli("up", "-f", spec, "--detach", home=home)
            assert up.returncode == 0, up.stderr
            st = json.loads(_cli("status", "--json", home=home).stdout)
            assert [s["kind"] for s in st["sandboxes"]] == ["android"]
            client = FarmClient(st["control_address"], holder="android-local-test")
            try:
                with client.lease("android", ttl_s=30.0, wait_timeout_s=60) as lease:
                    env = farm.connect(lease.endpoint)
                    try:
                        reward, _, actions = oracles.run_episode(env, "android/contacts-delete", 2)
                        assert reward == 1.0 and actions[-1] == "done()"
                    finally:
                        env.close()
            finally:
                client.close()
            assert _cli("down", home=home).returncode == 0
        finally:
            server.kill()


def test_android_farm_on_docker(home: Path) -> None:
    """Where the image exists and KVM works: a farm of one android sandbox, one episode."""
    client = _daemon()
    if client is None or not any(
        "farm-android:latest" in (i.tags or []) for i in client.images.list()
    ):
        pytest.skip(
            "no farm-android image here: it can only be built where the Android SDK can be "
            "downloaded (see sandbox_images/android/README.md)"
        )
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        pytest.skip("no usable /dev/kvm here")
    import farm
    from env_adapters.android import oracles
    from orchestration.client import FarmClient

    spec = write_spec(home, {**ANDROID_DOCKER, "count": 1})
    r = _cli("up", "-f", spec, "--detach", home=home)
    assert r.returncode == 0, r.stderr
    st = json.loads(_cli("status", "--json", home=home).stdout)
    farm_client = FarmClient(st["control_address"], holder="android-test")
    try:
        with farm_client.lease("android", ttl_s=30.0, wait_timeout_s=600) as lease:
            env = farm.connect(lease.endpoint)
            try:
                reward, _, _ = oracles.run_episode(env, "android/settings-wifi", 0)
                assert reward == 1.0
            finally:
                env.close()
    finally:
        farm_client.close()
    assert _cli("down", home=home).returncode == 0
