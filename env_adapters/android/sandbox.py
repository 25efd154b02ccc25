"""``python -m env_adapters.android.sandbox ENV [farm serve options]``: the ``farm-android``
image's entrypoint: boot an emulator next to the farm server, make it ready, serve.

1. checks what it needs, and says precisely what is missing: the SDK's
   ``emulator`` (``$ANDROID_SDK_ROOT/emulator/emulator``), the AVD (``farm``,
   made by the Dockerfile with ``avdmanager``), ``adb``, and ``/dev/kvm``
   read/write (``docker run --device /dev/kvm``; the docker backend passes it);
2. starts the adb server first (it makes ``~/.android/adbkey``, which the
   emulator's adbd then trusts), and copies the AVD's configuration into a writable directory
   (``$FARM_ANDROID_AVD_HOME``, default ``/run/farm/avd``: the sandbox's own
   host directory; the root file system is read-only), so the emulator's disks
   and snapshots live there and go with the sandbox;
3. boots the emulator headless with KVM (``-no-window -no-audio -no-boot-anim
   -gpu swiftshader_indirect -no-snapshot-save``) on console port 5554
   (serial ``emulator-5554``) and waits for ``sys.boot_completed``;
4. makes the device quiet and fast: animations off (``window_animation_scale``,
   ``transition_animation_scale``, ``animator_duration_scale`` = 0), screen always
   on, unlocked; ``adb root`` (the task checkers read DeskClock's provider);
5. saves the snapshot ``farm-ready`` on the emulator console (every reset
   then loads it: :mod:`env_adapters.android.env`);
6. replaces itself with ``farm serve ENV ...`` (``FARM_ANDROID_SERIAL=emulator-5554``),
   which writes the ready file the docker backend waits for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from env_adapters.android.device import (
    AdbServer,
    Device,
    EmulatorConsole,
    console_token,
)

CONSOLE_PORT = 5554
SERIAL = f"emulator-{CONSOLE_PORT}"
AVD = "farm"
SNAPSHOT = "farm-ready"
QUIET = (
    "settings put global window_animation_scale 0",
    "settings put global transition_animation_scale 0",
    "settings put global animator_duration_scale 0",
    "settings put system screen_off_timeout 2147483647",
    "svc power stayon true",
    "input keyevent 224",
    "input keyevent 82",
    "wm dismiss-keyguard",
)


def sdk_root() -> Path:
    return Path(
        os.environ.get("ANDROID_SDK_ROOT") or os.environ.get("ANDROID_HOME") or "/opt/android-sdk"
    )


def missing() -> list[str]:
    """What this host lacks to run an emulator, one precise line each (empty: nothing)."""
    problems = []
    sdk = sdk_root()
    emulator = sdk / "emulator" / "emulator"
    if not os.access(emulator, os.X_OK):
        problems.append(
            f"no Android emulator at {emulator} (ANDROID_SDK_ROOT={sdk}): install the SDK's "
            "command-line tools and run `sdkmanager emulator platform-tools "
            "'system-images;android-34;google_apis;x86_64'` (needs internet), or use the "
            "farm-android image (`farm images build --kind android`)"
        )
    template = Path(os.environ.get("FARM_ANDROID_AVD_TEMPLATE", "/opt/android-avd"))
    if not (template / f"{AVD}.ini").is_file():
        problems.append(
            f"no AVD {AVD!r} in {template} (the image makes it with "
            f"`avdmanager create avd -n {AVD} ...`)"
        )
    if shutil.which("adb") is None and not (sdk / "platform-tools" / "adb").exists():
        problems.append("no adb (apt-get install adb, or `sdkmanager platform-tools`)")
    if not os.path.exists("/dev/kvm"):
        problems.append(
            "no /dev/kvm: the emulator needs hardware virtualisation (KVM); run the container "
            "with --device /dev/kvm on a host that has it (bare metal or nested virtualisation)"
        )
    elif not os.access("/dev/kvm", os.R_OK | os.W_OK):
        problems.append(
            f"/dev/kvm is not read/write for uid {os.getuid()} (add the container to the "
            "device's group: docker run --group-add $(stat -c %g /dev/kvm))"
        )
    return problems


def prepare_avd_home() -> Path:
    """A writable copy of the AVD's configuration; returns ``ANDROID_AVD_HOME``."""
    template = Path(os.environ.get("FARM_ANDROID_AVD_TEMPLATE", "/opt/android-avd"))
    home = Path(os.environ.get("FARM_ANDROID_AVD_HOME", "/run/farm/avd"))
    avd_dir = home / f"{AVD}.avd"
    if not avd_dir.exists():
        shutil.copytree(template / f"{AVD}.avd", avd_dir)
    ini = (template / f"{AVD}.ini").read_text()
    lines = [ln for ln in ini.splitlines() if not ln.startswith(("path=", "path.rel="))]
    (home / f"{AVD}.ini").write_text("\n".join([*lines, f"path={avd_dir}"]) + "\n")
    return home


def boot(boot_timeout_s: float) -> subprocess.Popen[bytes]:
    """Start the emulator and wait until it is booted, quiet, root and snapshotted."""
    avd_home = prepare_avd_home()
    sdk = sdk_root()
    env = {**os.environ, "ANDROID_AVD_HOME": str(avd_home), "ANDROID_SDK_ROOT": str(sdk)}
    server = AdbServer()
    server.ensure()  # first: it makes ~/.android/adbkey, which the booting emulator trusts
    log = open(avd_home / "emulator.log", "ab")  # noqa: SIM115 - the emulator's for its life
    cmd = [
        str(sdk / "emulator" / "emulator"),
        "-avd", AVD, "-port", str(CONSOLE_PORT),
        "-no-window", "-no-audio", "-no-boot-anim", "-no-snapshot-save",
        "-gpu", "swiftshader_indirect", "-accel", "on",
    ]  # fmt: skip
    emulator = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    device = Device(SERIAL, server, timeout_s=30)
    deadline = time.monotonic() + boot_timeout_s
    while True:
        if emulator.poll() is not None:
            raise SystemExit(
                f"the emulator exited with code {emulator.returncode} while booting; "
                f"see {avd_home / 'emulator.log'}"
            )
        try:
            device.connect(timeout_s=10)
            break
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline:
                emulator.kill()
                raise SystemExit(f"the emulator did not boot in {boot_timeout_s:g} s") from None
    for command in QUIET:
        device.shell(command)
    server.run("-s", SERIAL, "root")
    device.connect(timeout_s=60)  # adbd restarts as root
    console = EmulatorConsole(CONSOLE_PORT, console_token())
    console.save_snapshot(SNAPSHOT)
    console.close()
    return emulator


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    problems = missing()
    if problems:
        print("farm-android cannot start an emulator:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    boot(float(os.environ.get("FARM_ANDROID_BOOT_TIMEOUT_S", "600")))
    print(f"emulator {SERIAL} ready in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    os.environ["FARM_ANDROID_SERIAL"] = SERIAL
    farm = shutil.which("farm") or "farm"
    os.execv(farm, [farm, "serve", *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
