"""The Android adapter against ``AdbDeviceSimulator`` (a test double of a device) through
Debian's real ``adb`` server and unmodified ``adbutils``.

The simulator speaks the adb wire protocol on 127.0.0.1; the adb server (a private
port per module, killed at the end) connects to it with ``adb connect``; the adapter
talks to that server through adbutils. So everything but the device itself is real.
The shared adapter tests come from ``android_cases.py`` (also run against a real
emulator by ``test_android_emulator.py``); the tests here add what only a simulator
can do (a device going offline or hanging on cue) and the pieces' own tests.

Prerequisites (Debian's ``adb``, the ``android`` extra) are installed by
scripts/bootstrap; when one is missing these tests fail saying which.
"""

from __future__ import annotations

import json
import shutil
import socket
import statistics
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.android

if shutil.which("adb") is None:
    pytest.fail("adb is missing: apt-get install adb (scripts/bootstrap does)", pytrace=False)
try:
    import adbutils
except ImportError:
    pytest.fail("adbutils is missing: pip install -e '.[android]' (scripts/bootstrap)")

from android_cases import *  # noqa: E402,F403
from android_cases import AndroidTarget, adb_devices, meta, ref_of, step_times  # noqa: E402

import farm  # noqa: E402
from env_adapters.android import input as inp  # noqa: E402
from env_adapters.android import oracles  # noqa: E402
from env_adapters.android.device import AdbServer, Device, DeviceGone  # noqa: E402
from env_adapters.android.env import AndroidEnv, AndroidTask  # noqa: E402
from env_adapters.android.hierarchy import parse  # noqa: E402
from env_adapters.android.screen import decode  # noqa: E402
from env_adapters.android.simulator import AdbDeviceSimulator  # noqa: E402
from env_adapters.android.tasks import SPECS  # noqa: E402
from env_adapters.gui import SandboxCrashed  # noqa: E402
from env_adapters.gui import actions as A  # noqa: E402
from farm.env import TRUNCATED_REASON  # noqa: E402
from farm.errors import ConfigError  # noqa: E402
from farm.server.process import ServerProcess  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbServer]:
    """A private adb server on a free loopback port (its key and logs in a temp dir)."""
    server = AdbServer(free_port(), home=str(tmp_path_factory.mktemp("adb-home")))
    server.ensure()
    yield server
    server.kill()
    assert not server.running()


@pytest.fixture(scope="module")
def simulator() -> Iterator[AdbDeviceSimulator]:
    with AdbDeviceSimulator() as sim:
        yield sim


def sim_kwargs(sim: AdbDeviceSimulator) -> dict[str, object]:
    return {
        "console_port": sim.console_port,
        "console_token": sim.console_token,
        "settle_ms": 0,  # the simulator draws its next screen before it answers
    }


@pytest.fixture
def android(simulator: AdbDeviceSimulator, adb_server: AdbServer) -> Iterator[AndroidTarget]:
    target = AndroidTarget("simulator", simulator.serial, adb_server, sim_kwargs(simulator))
    yield target
    target.close()


@pytest.fixture
def own_sim(adb_server: AdbServer) -> Iterator[tuple[AdbDeviceSimulator, AndroidTarget]]:
    """A simulator of its own (for faults that would disturb the shared one)."""
    with AdbDeviceSimulator() as sim:
        target = AndroidTarget("simulator", sim.serial, adb_server, sim_kwargs(sim))
        yield sim, target
        target.close()
        adb_server.run("disconnect", sim.serial)


# ---------------------------------------------------------------- the wire, for real


def test_real_adb_and_adbutils_talk_to_the_simulator(
    simulator: AdbDeviceSimulator, adb_server: AdbServer
) -> None:
    connected = adb_server.run("connect", simulator.serial).stdout
    assert "connected to" in connected
    listing = adb_devices(adb_server)
    assert f"{simulator.serial}" in listing and "model:FarmAdbSimulator" in listing
    line = next(ln for ln in listing.splitlines() if ln.startswith(simulator.serial))
    assert line.split()[1] == "device"
    out = adb_server.run("-s", simulator.serial, "shell", "settings get global wifi_on").stdout
    assert out.strip() in ("0", "1")
    client = adbutils.AdbClient(host="127.0.0.1", port=adb_server.port)
    d = client.device(simulator.serial)
    assert d.shell("getprop ro.product.model") == "FarmAdbSimulator"
    assert d.shell(["echo", "two words", "it's"]) == "two words it's"  # quoting survives
    big = d.shell("screencap -p", encoding=None)  # many WRTE/OKAY round trips
    assert big[:8] == b"\x89PNG\r\n\x1a\n" and len(big) > 10_000
    assert d.window_size() == (720, 1280)


@pytest.mark.parametrize("auth", ["accept", "reject"])
def test_adb_authentication(adb_server: AdbServer, auth: str) -> None:
    """The real server signs the device's token with its key; a device that takes no
    signature stays ``unauthorized``, and the adapter says so."""
    with AdbDeviceSimulator(auth=auth) as sim:
        device = Device(sim.serial, adb_server, timeout_s=3)
        try:
            if auth == "accept":
                device.connect(timeout_s=10)
                assert device.shell("getprop ro.product.model").strip() == "FarmAdbSimulator"
            else:
                with pytest.raises(
                    DeviceGone, match=r"refused this adb server's key \(unauthorized"
                ):
                    device.connect(timeout_s=3)
                assert device.state() == "unauthorized"  # as `adb devices` lists it
        finally:
            adb_server.run("disconnect", sim.serial)


def test_exec_screencap_and_console_screenshot_agree(
    simulator: AdbDeviceSimulator, adb_server: AdbServer
) -> None:
    env = AndroidTarget("simulator", simulator.serial, adb_server, sim_kwargs(simulator)).make(
        "android/settings-wifi", screenshot="screencap"
    )
    try:
        obs, _ = env.reset(seed=0)
        png = env.device.exec_out("screencap -p")
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        from env_adapters.android.screen import console_screenshot

        assert env.console is not None
        via_console = decode(console_screenshot(env.console), (720, 1280))
        assert np.array_equal(via_console, obs["screenshot"])
        assert np.array_equal(decode(png, (720, 1280)), obs["screenshot"])
    finally:
        env.close()


# ---------------------------------------------------------------- resets


def test_snapshot_reset_loads_the_snapshot_and_restores_everything(
    own_sim: tuple[AdbDeviceSimulator, AndroidTarget],
) -> None:
    sim, target = own_sim
    env = target.make("android/settings-dark-theme")
    obs, info = env.reset(seed=0)
    assert info["reset_method"] == "snapshot" and "snapshot_unavailable" not in info
    env.device.shell("mkdir -p /sdcard/Download && printf %s x > /sdcard/Download/left.txt")
    env.device.shell("settings put system screen_brightness 7")
    loads = sum("avd snapshot load" in c for c in sim.console_log)
    obs, info = env.reset(seed=0)
    assert sum("avd snapshot load" in c for c in sim.console_log) == loads + 1
    assert env.device.shell("ls /sdcard/Download").strip() == ""
    assert env.device.shell("settings get system screen_brightness").strip() == "128"
    assert info["reset_method"] == "snapshot" and info["restore_s"] < 5
    assert meta(obs)["package"] == "com.android.launcher3"  # this task starts at home


def test_app_data_reset_without_a_console(
    simulator: AdbDeviceSimulator, android: AndroidTarget
) -> None:
    env = android.make("android/files-delete", console_port=None)
    _, info = env.reset(seed=0)
    assert info["reset_method"] == "app-data"
    assert "has no emulator console" in info["snapshot_unavailable"]
    env.device.shell("printf %s x > /sdcard/Download/leftover.txt")
    before = len(simulator.commands)
    _, info = env.reset(seed=1)
    restore = next(c for c in simulator.commands[before:] if "pm clear" in c)
    assert "am force-stop com.android.documentsui" in restore
    assert "pm clear com.android.documentsui" in restore and "rm -rf /sdcard/Download/*" in restore
    assert "leftover.txt" not in env.device.shell("ls /sdcard/Download")
    assert info["restore_s"] < 2
    env.device.shell("cmd uimode night yes; svc bluetooth enable")  # an earlier episode's
    env.reset(seed=2)
    assert env.ctx.setting("secure", "ui_night_mode") == "1"
    assert env.ctx.setting("global", "bluetooth_on") == "0"


def test_snapshot_reset_needs_a_console_and_the_snapshot(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi", console_port=None, reset_method="snapshot")
    with pytest.raises(ConfigError, match="has no emulator console"):
        env.reset(seed=0)
    env = android.make("android/settings-wifi", snapshot="nope", reset_method="snapshot")
    with pytest.raises(ConfigError, match=r"no snapshot 'nope' .it has: farm-ready"):
        env.reset(seed=0)
    env = android.make("android/settings-wifi", console_token="wrong")
    _, info = env.reset(seed=0)  # auto: a console that refuses the token means app-data
    assert info["reset_method"] == "app-data"
    assert "authentication token does not match" in info["snapshot_unavailable"]


# ---------------------------------------------------------------- faults


def test_device_offline_mid_episode_truncates_and_next_reset_recovers(
    own_sim: tuple[AdbDeviceSimulator, AndroidTarget],
) -> None:
    sim, target = own_sim
    env = target.make("android/settings-wifi")
    obs, _ = env.reset(seed=0)
    sim.go_offline()
    obs, reward, term, trunc, info = env.step(f"click_element({ref_of(obs, 'Display')})")
    assert trunc and not term and reward == 0.0
    reason = info[TRUNCATED_REASON]
    assert reason.startswith("sandbox: device " + sim.serial) and "does not answer" in reason
    assert obs["screenshot"].max() == 0 and "error" in meta(obs)
    with pytest.raises(DeviceGone, match=f"device {sim.serial} does not answer"):
        env.reset(seed=0)  # still gone: a clear error, not a hang
    sim.come_back()
    obs, info = env.reset(seed=0)
    assert meta(obs)["package"] == "com.android.settings"
    assert not env.step(f"click_element({ref_of(obs, 'Display')})")[3]


def test_hung_device_truncates_after_the_op_timeout(
    own_sim: tuple[AdbDeviceSimulator, AndroidTarget],
) -> None:
    sim, target = own_sim
    env = target.make("android/settings-wifi", op_timeout_s=2.0)
    obs, _ = env.reset(seed=0)
    sim.hang()
    obs, _, _, trunc, info = env.step(f"click_element({ref_of(obs, 'Display')})")
    assert trunc and "did not finish" in info[TRUNCATED_REASON]
    sim.come_back()
    obs, _ = env.reset(seed=0)
    assert "Network & internet" in obs["text"]


def test_no_device_is_a_clear_error(adb_server: AdbServer) -> None:
    target = AndroidTarget("simulator", f"127.0.0.1:{free_port()}", adb_server)
    env = target.make("android/settings-wifi")
    try:
        with pytest.raises(SandboxCrashed, match=r"does not answer: .*(unable|failed) to connect"):
            env.reset(seed=0)
    finally:
        target.close()
    env = AndroidEnv(
        SPECS["android/settings-wifi"], serial="emulator-5598", adb_port=adb_server.port
    )
    try:
        with pytest.raises(SandboxCrashed, match="emulator-5598 is not known to the adb server"):
            env.boot_timeout_s = 1.0
            env.reset(seed=0)
    finally:
        env.close()


class _BrokenCheck(AndroidTask):
    def setup(self, ctx, rng):
        ctx.launch("settings")
        return "Do nothing."

    def check(self, ctx):
        return {"no": "tuple"}["missing"]


def test_a_checker_that_raises_truncates_with_the_reason(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi", android_task=_BrokenCheck())
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step("done()")
    assert trunc and not term and reward == 0.0
    assert info[TRUNCATED_REASON].startswith("checker: the checker of android/settings-wifi raised")
    assert "Network & internet" in obs["text"]  # the device is fine and still observed
    assert env.reset(seed=0)[1]["reset_s"] > 0


# ---------------------------------------------------------------- served, and timed


def test_farm_serve_android_with_the_oracle(
    simulator: AdbDeviceSimulator, adb_server: AdbServer, sock_path
) -> None:
    kwargs = {
        "serial": simulator.serial,
        "adb_port": adb_server.port,
        **sim_kwargs(simulator),
    }
    srv = ServerProcess(
        "android/clock-add-alarm", address=sock_path("android"), env_kwargs=json.dumps(kwargs)
    )
    srv.start()
    try:
        env = farm.connect(srv.address)
        try:
            reward, steps, actions = oracles.run_episode(
                env, oracles.oracle_for("android/clock-add-alarm"), 4
            )
            assert reward == 1.0 and actions[-1] == "done()" and steps >= 5
        finally:
            env.close()
    finally:
        srv.stop()


def test_step_and_reset_times(android: AndroidTarget, capsys: pytest.CaptureFixture[str]) -> None:
    env = android.make("android/settings-wifi")
    resets = []
    for seed in range(5):
        resets.append(env.reset(seed=seed)[1])

    def toggle(obs: dict[str, object]) -> str:  # in and out of Display: a new screen each step
        return (
            f"click_element({ref_of(obs, 'Display')})"
            if "Display" in str(obs["text"])
            else 'key("back")'
        )

    times = step_times(env, toggle, 20)
    p50 = statistics.median(times)
    reset_p50 = statistics.median(r["reset_s"] for r in resets)
    with capsys.disabled():
        print(
            f"\n[android simulator] reset p50 {reset_p50 * 1000:.0f} ms "
            f"({resets[-1]['reset_method']}, restore p50 "
            f"{statistics.median(r['restore_s'] for r in resets) * 1000:.0f} ms); "
            f"step p50 {p50 * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
        )
    assert p50 < 1.0 and reset_p50 < 3.0


# ---------------------------------------------------------------- the pieces


def test_text_commands_quote_and_split() -> None:
    assert inp.text_commands("a b") == ["input text a%sb"]
    assert inp.text_commands("50%s x") == ["input text 50", "input text %", "input text s%sx"]
    assert inp.text_commands("it's\nok") == [
        "input text 'it'\"'\"'s'",
        "input keyevent 66",
        "input text ok",
    ]
    with pytest.raises(A.ActionError, match="cannot send 'é', '✓'"):
        inp.text_commands("é ✓ é")
    assert inp.key_command("back") == "input keyevent 4"
    assert inp.key_command("Home") == "input keyevent 3"
    assert inp.key_command("Enter") == "input keyevent 66"
    assert inp.key_command("ctrl+a") == "input keycombination 113 29"
    assert inp.key_command("A") == "input keycombination 59 29"
    with pytest.raises(A.ActionError, match="unknown key"):
        inp.key_command("Hyper")
    assert inp.scroll(100, 600, 0, 300, 720, 1280) == "input swipe 100 600 100 300 300"


def test_hierarchy_of_a_real_dump() -> None:
    xml = (
        "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"
        '<node index="0" text="" resource-id="" class="android.widget.FrameLayout" '
        'package="com.android.settings" content-desc="" checkable="false" checked="false" '
        'clickable="false" enabled="true" focusable="false" focused="false" scrollable="false" '
        'long-clickable="false" password="false" selected="false" bounds="[0,0][1080,2400]">'
        '<node index="0" text="" resource-id="" class="android.widget.LinearLayout" '
        'package="com.android.settings" content-desc="" checkable="false" checked="false" '
        'clickable="true" enabled="true" focusable="true" focused="false" scrollable="false" '
        'long-clickable="false" password="false" selected="false" bounds="[0,300][1080,480]">'
        '<node index="0" text="Network &amp; internet" resource-id="android:id/title" '
        'class="android.widget.TextView" package="com.android.settings" content-desc="" '
        'checkable="false" checked="false" clickable="false" enabled="true" focusable="false" '
        'focused="false" scrollable="false" long-clickable="false" password="false" '
        'selected="false" bounds="[48,330][700,390]" /></node>'
        '<node index="1" text="" resource-id="android:id/switch_widget" '
        'class="android.widget.Switch" package="com.android.settings" content-desc="Wi-Fi" '
        'checkable="true" checked="true" clickable="true" enabled="false" focusable="true" '
        'focused="false" scrollable="false" long-clickable="false" password="false" '
        'selected="false" bounds="[900,500][1040,580]" />'
        '<node index="2" text="bob" resource-id="com.x:id/name" class="android.widget.EditText" '
        'package="com.x" content-desc="" checkable="false" checked="false" clickable="true" '
        'enabled="true" focusable="true" focused="true" scrollable="false" '
        'long-clickable="true" password="false" selected="false" bounds="[0,600][1080,700]" />'
        "</node></hierarchy>"
    )
    view = parse(xml, scale=(0.5, 0.5))
    assert view.text.splitlines() == [
        '[1] view "Network & internet" @(0,150,540,90)',
        '[2] switch "Wi-Fi" value="on" disabled @(450,250,70,40)',
        '[3] textbox "name" value="bob" focused long-clickable @(0,300,540,50)',
    ]


def test_the_client_never_falls_back_to_the_default_server(tmp_path: Path) -> None:
    """adbutils alone would run ``adb start-server`` (port 5037) when its server is down."""

    def default_server_up() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", 5037)) == 0

    before = default_server_up()
    server = AdbServer(free_port(), home=str(tmp_path))  # nothing listens there yet
    device = Device("127.0.0.1:5", server, timeout_s=2)
    with pytest.raises(DeviceGone, match=r"127\.0\.0\.1:5 does not answer"):
        device.connect(timeout_s=2)  # starts *its own* server, then finds no device
    assert server.running() and server.starts == 1
    server.kill()
    with pytest.raises(DeviceGone, match="does not answer"):
        device.call("shell:echo x")  # the server is gone: it starts its own again
    assert server.starts == 2
    server.kill()
    assert default_server_up() == before  # nobody started a server on 5037
