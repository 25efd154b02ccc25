"""The Android adapter tests of ``android_cases.py`` against a real Android emulator.

The device is ``$FARM_ANDROID_SERIAL`` (any serial adb knows: ``emulator-5554``,
``HOST:PORT``), else the first emulator whose console answers on 127.0.0.1:5554-5584.
It must run an AOSP ``google_apis`` x86_64 image with the stock apps the suite uses
(Settings, Contacts, Clock, Files, the WebView browser shell), adbd as root
(``adb root``, for DeskClock's provider) and animations off; the image of
``sandbox_images/android`` is such a device. The tests use a private adb server on
``$FARM_ADB_PORT`` (default: a free port), killed at the end.

Without an emulator (this machine has ``/dev/kvm`` but cannot download Android system
images) the whole module is skipped, and pytest's ``-ra`` summary prints why.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.android


def _console_banner(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.settimeout(0.5)
            return b"Android Console" in s.recv(256)
    except OSError:
        return False


def find_emulator() -> tuple[str | None, str]:
    """(serial, "") of the device to test, or (None, why there is none)."""
    serial = os.environ.get("FARM_ANDROID_SERIAL")
    if serial:
        return serial, ""
    for port in range(5554, 5586, 2):
        if _console_banner(port):
            return f"emulator-{port}", ""
    return None, (
        "no Android emulator here: FARM_ANDROID_SERIAL is unset and no emulator console "
        "answers on 127.0.0.1:5554-5584 (this machine cannot download Android system "
        "images; run the farm-android image of sandbox_images/android, or set "
        "FARM_ANDROID_SERIAL); the same adapter tests run against AdbDeviceSimulator in "
        "test_android_sim.py"
    )


SERIAL, WHY = find_emulator()
if SERIAL is None:
    pytest.skip(WHY, allow_module_level=True)
if shutil.which("adb") is None:
    pytest.fail("adb is missing: apt-get install adb (scripts/bootstrap does)", pytrace=False)

from android_cases import *  # noqa: E402,F403
from android_cases import AndroidTarget  # noqa: E402

from env_adapters.android.device import AdbServer  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbServer]:
    port = int(os.environ.get("FARM_ADB_PORT") or _free_port())
    server = AdbServer(port)  # the real ~/.android/adbkey: the emulator trusts it
    started = server.ensure()
    yield server
    if started:
        server.kill()


@pytest.fixture
def android(adb_server: AdbServer) -> Iterator[AndroidTarget]:
    assert SERIAL is not None
    target = AndroidTarget("emulator", SERIAL, adb_server, {"settle_ms": 150})
    yield target
    target.close()
