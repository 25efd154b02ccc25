"""``AndroidEnv``: the shared GUI interface (:mod:`env_adapters.gui`) over one Android device.

An :class:`AndroidEnv` runs one Android task (:mod:`env_adapters.android.tasks`)
on a device reached through an adb server (:mod:`env_adapters.android.device`):
an emulator next to the farm server (``emulator-5554``, the docker image), or
any ``HOST:PORT`` device (``adb connect``). The serial comes from the
``serial`` kwarg, else ``$FARM_ANDROID_SERIAL``, else ``emulator-5554``; the
adb server port from ``adb_port``, else ``$FARM_ADB_PORT``, else
``$ANDROID_ADB_SERVER_PORT``, else 5037 (started on loopback if none answers).

Lifecycle: the first reset connects (``adb connect`` for TCP serials), waits
for ``sys.boot_completed``, reads the screen size (``wm size``) and looks for
the emulator console. Every reset restores a clean device, then lets the task
set up its state and start its app:

* ``snapshot``: ``avd snapshot load <snapshot>`` on the emulator console (the
  image saves ``farm-ready`` after its first boot), then waits until adb sees the
  device again; used when the console answers and has that snapshot;
* ``app-data`` otherwise: force-stop the task's apps, ``pm clear`` their data
  packages (contacts provider, clock, files, browser), empty their directories
  (``/sdcard/Download``), put the settings the suite changes back to their
  defaults (:data:`SETTINGS_BASELINE`), go home.

``info["reset_s"]`` is the whole reset, ``info["restore_s"]`` the restore,
``info["reset_method"]`` which one ran (and ``info["snapshot_unavailable"]`` why
not a snapshot, under ``auto``).

Per step the action becomes ``input`` commands (:mod:`env_adapters.android.input`;
``right_click`` is a long press), the env waits ``settle_ms``, then observes
concurrently: the screenshot (``screencap -p`` through ``exec:``, or the
emulator console; :mod:`env_adapters.android.screen`), the UI hierarchy
(``uiautomator dump``; :mod:`env_adapters.android.hierarchy`), the foreground
activity (``dumpsys activity activities``). The metadata holds the package and
activity, the element count, ``ui_error`` when the hierarchy could not be read,
and ``adb_events`` when the adb connection was recovered during the step.
Observations are ``width x height``; a device of another size is scaled (its
screenshots resized, action coordinates and element boxes mapped).

Rewards: the task's checker runs at ``done()`` and reads the device's real
state over adb (settings, content providers, files, dumpsys); steps earn 0.

Bad input: a point off the screen, an unknown element ref, text ``input text``
cannot send (non-ASCII) or longer than ``max_type_chars``: a no-op step with
``info["action_error"]``. The device going offline or the adb server dying:
each adb call restarts the server / reconnects once and retries; a device
that stays gone truncates the episode (``info["farm.truncated_reason"]``), and
the next reset reconnects. A checker that cannot read its state truncates too.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from env_adapters.android import apps as apps_mod
from env_adapters.android import input as inp
from env_adapters.android import screen
from env_adapters.android.context import CheckerError, TaskContext, dump_ui_command
from env_adapters.android.device import (
    DEFAULT_SERVER_PORT,
    AdbServer,
    ConsoleError,
    Device,
    DeviceGone,
    EmulatorConsole,
    console_port_of,
    console_token,
)
from env_adapters.android.hierarchy import UiDumpError, UiView, extract_xml, parse
from env_adapters.gui import SandboxCrashed
from env_adapters.gui import actions as A
from env_adapters.gui.env import CheckedGuiEnv
from env_adapters.gui.tasks import TaskLogic, TaskSpec
from farm.errors import ConfigError

MAX_TYPE_CHARS = 1_000
#: the app-data reset's settings (the AVD's defaults; the suite's tasks change these)
SETTINGS_BASELINE = (
    "cmd connectivity airplane-mode disable",
    "svc wifi enable",
    "svc bluetooth disable",
    "cmd uimode night no >/dev/null",
    "settings put system accelerometer_rotation 0",
)
DEFAULT_SERIAL = "emulator-5554"
SNAPSHOT = "farm-ready"


class AndroidTask(TaskLogic[TaskContext]):
    """What an episode means on a phone: set up state, give the instruction, check.

    Subclasses override :meth:`setup` (seed data, start the app through the
    context; return the instruction) and :meth:`check` (read real device state;
    return reward and info).
    """


def _env_int(*names: str, default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value:
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"${name} must be a port number, got {value!r}") from None
    return default


class AndroidEnv(CheckedGuiEnv):
    """A GUI env over one Android device; see the module doc.

    Args:
        task: a ``kind="android"`` task spec.
        android_task: its logic (default: looked up by id in :mod:`env_adapters.android.tasks`).
        serial: the device (default ``$FARM_ANDROID_SERIAL``, else ``emulator-5554``).
        adb_port: the adb server's port (default ``$FARM_ADB_PORT``,
            ``$ANDROID_ADB_SERVER_PORT``, else 5037).
        adb: the adb binary (default ``$FARM_ADB`` or ``adb`` on ``$PATH``).
        adb_home: ``ANDROID_SDK_HOME`` of an adb server this env starts (default: unchanged).
        console_port: the emulator console (default: from an ``emulator-N`` serial, or
            ``$FARM_ANDROID_CONSOLE_PORT``; none for other serials).
        console_token: its auth token (default: ``~/.emulator_console_auth_token``).
        snapshot: the snapshot a reset loads.
        reset_method: ``"auto"`` (snapshot when available, else app data), ``"snapshot"``
            or ``"app-data"``.
        screenshot: ``"auto"`` (console when there is one, else screencap), ``"screencap"``
            or ``"console"``.
        width, height: observation size.
        op_timeout_s: bound of every sandbox operation.
        settle_ms: pause after an action before observing.
        max_type_chars: longest text ``type``/``type_element`` accept.
        boot_timeout_s: how long the first reset waits for the device to be online and booted.
        kill_server_on_close: stop the adb server when the env closes (a private server).
    """

    def __init__(
        self,
        task: TaskSpec,
        *,
        android_task: AndroidTask | None = None,
        serial: str | None = None,
        adb_port: int | None = None,
        adb: str | None = None,
        adb_home: str | None = None,
        console_port: int | None = None,
        console_token: str | None = None,
        snapshot: str = SNAPSHOT,
        reset_method: str = "auto",
        screenshot: str = "auto",
        width: int = 720,
        height: int = 1280,
        action_format: str = "text",
        op_timeout_s: float = 20.0,
        settle_ms: int = 50,
        max_type_chars: int = MAX_TYPE_CHARS,
        boot_timeout_s: float = 120.0,
        kill_server_on_close: bool = False,
    ) -> None:
        if task.kind != "android":
            raise ConfigError(f"AndroidEnv runs android tasks, {task.id} is a {task.kind} task")
        if reset_method not in ("auto", "snapshot", "app-data"):
            raise ConfigError(f"reset_method must be auto, snapshot or app-data: {reset_method!r}")
        if screenshot not in ("auto", "screencap", "console"):
            raise ConfigError(f"screenshot must be auto, screencap or console: {screenshot!r}")
        super().__init__(
            task, width=width, height=height, action_format=action_format, op_timeout_s=op_timeout_s
        )
        if android_task is None:
            from env_adapters.android.tasks import task_logic

            android_task = task_logic(task)
        self.android_task = android_task
        self.serial = serial or os.environ.get("FARM_ANDROID_SERIAL") or DEFAULT_SERIAL
        port = adb_port or _env_int(
            "FARM_ADB_PORT", "ANDROID_ADB_SERVER_PORT", default=DEFAULT_SERVER_PORT
        )
        self.server = AdbServer(port, adb=adb, home=adb_home)
        self.device = Device(self.serial, self.server, timeout_s=max(1.0, op_timeout_s * 0.75))
        self.console_port = (
            console_port
            or console_port_of(self.serial)
            or _env_int("FARM_ANDROID_CONSOLE_PORT", default=0)
            or None
        )
        self.console_token = console_token
        self.snapshot = snapshot
        self.reset_method = reset_method
        self.screenshot_mode = screenshot
        self.settle_s = settle_ms / 1000
        self.max_type_chars = max_type_chars
        self.boot_timeout_s = boot_timeout_s
        self.launch_timeout_s = boot_timeout_s + 10
        self.kill_server_on_close = kill_server_on_close
        self.console: EmulatorConsole | None = None
        self.device_size = (width, height)
        self.ctx = TaskContext(self.device)
        self._snapshot_unavailable: str | None = None
        self._reset_info: dict[str, Any] = {}
        self._last_view = UiView()
        self._pool: ThreadPoolExecutor | None = None
        self._check_info: dict[str, Any] = {}
        self._console_shots = True  # auto: console screenshots until one fails

    # ------------------------------------------------------------ geometry

    def _to_device(self, x: int, y: int) -> tuple[int, int]:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise A.ActionError(
                f"({x}, {y}) is outside the screen; x must be in 0..{self.width - 1} and "
                f"y in 0..{self.height - 1}"
            )
        dw, dh = self.device_size
        return min(dw - 1, x * dw // self.width), min(dh - 1, y * dh // self.height)

    @property
    def _scale(self) -> tuple[float, float]:
        dw, dh = self.device_size
        return self.width / dw, self.height / dh

    # ------------------------------------------------------------ CheckedGuiEnv hooks

    def _launch_sync(self) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(3, thread_name_prefix="farm-android")
        self.device.connect(timeout_s=self.boot_timeout_s)
        self.device.take_events()
        size = self.device.shell("wm size")
        m = re.search(r"Override size: (\d+)x(\d+)", size) or re.search(
            r"Physical size: (\d+)x(\d+)", size
        )
        if m is None:
            raise DeviceGone(f"`wm size` on {self.serial} gave no screen size: {size.strip()!r}")
        self.device_size = (int(m.group(1)), int(m.group(2)))
        self._connect_console()

    def _connect_console(self) -> None:
        self._snapshot_unavailable = None
        if self.console is not None:
            self.console.close()
            self.console = None
        if self.console_port is None:
            self._snapshot_unavailable = f"{self.serial} has no emulator console"
        else:
            console = EmulatorConsole(self.console_port, self.console_token or console_token())
            try:
                names = console.snapshots()
            except ConsoleError as e:
                console.close()
                self._snapshot_unavailable = str(e)
            else:
                self.console = console
                if self.snapshot not in names:
                    self._snapshot_unavailable = (
                        f"the emulator has no snapshot {self.snapshot!r} "
                        f"(it has: {', '.join(names) or 'none'})"
                    )
        if self.reset_method == "snapshot" and self._snapshot_unavailable:
            raise ConfigError(f"reset_method='snapshot' but {self._snapshot_unavailable}")
        if self.screenshot_mode == "console" and self.console is None:
            raise ConfigError(
                f"screenshot='console' but there is no emulator console for {self.serial}"
            )

    def _shutdown_sync(self) -> None:
        if self.console is not None:
            self.console.close()
            self.console = None
        self.device.close()
        if self.kill_server_on_close:
            self.server.kill()

    async def aclose(self) -> None:
        await super().aclose()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def _start_episode_sync(self, seed: int | None) -> str:
        t0 = time.perf_counter()
        if self.reset_method != "app-data" and self._snapshot_unavailable is None:
            method = "snapshot"
            assert self.console is not None
            try:
                self.console.load_snapshot(self.snapshot)
            except ConsoleError as e:
                raise SandboxCrashed(f"loading snapshot {self.snapshot!r}: {e}") from None
            self.device.connect(timeout_s=self.boot_timeout_s)  # adb reconnects after a load
        else:
            method = "app-data"
            self._restore_app_data()
        restore_s = time.perf_counter() - t0
        try:
            instruction = self.android_task.setup(self.ctx, self._episode_rng(seed))
        except CheckerError as e:
            raise SandboxCrashed(f"setting up {self.task.id}: {e}") from None
        self._last_view = UiView()
        self._reset_info = {
            "reset_method": method,
            "restore_s": round(restore_s, 4),
            "setup_s": round(time.perf_counter() - t0 - restore_s, 4),
        }
        if method == "app-data" and self.reset_method == "auto":
            self._reset_info["snapshot_unavailable"] = self._snapshot_unavailable
        self.device.take_events()
        return instruction

    def _restore_app_data(self) -> None:
        """Stop the task's apps, clear their data and directories, put the settings the
        suite changes back to the image's defaults, go home (one round trip)."""
        names = [str(a) for a in self.task.setup.get("apps", [])]
        commands = ["input keyevent 224", *SETTINGS_BASELINE]  # wake up
        for name in names:
            app = apps_mod.APPS[name]
            commands.append(f"am force-stop {app.package}")
            commands += [f"pm clear {pkg} >/dev/null" for pkg in app.data]
            commands += [f"rm -rf {d}/*" for d in app.dirs]
        commands.append("input keyevent 3")  # home
        self.device.shell("; ".join(commands))

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = await super().areset(seed=seed, options=options)
        return obs, {**info, **self._reset_info}

    def _perform_sync(self, action: A.Action) -> None:
        commands = self._commands(action)
        if commands:
            self.device.shell("; ".join(commands))
        if isinstance(action, A.SelectElement):
            self._pick_option(action)
        if self.settle_s:
            time.sleep(self.settle_s)

    def _checker(self) -> tuple[AndroidTask, TaskContext]:
        return self.android_task, self.ctx

    def _screenshot_png(self) -> bytes:
        use_console = self.screenshot_mode == "console" or (
            self.screenshot_mode == "auto" and self._console_shots
        )
        if self.console is not None and use_console:
            try:
                return screen.console_screenshot(self.console)
            except ConsoleError as e:
                if self.screenshot_mode == "console":
                    raise SandboxCrashed(f"console screenshot: {e}") from None
                self._console_shots = False  # (a remote emulator writes on its own host)
        return screen.screencap(self.device)

    def _observe_sync(self) -> tuple[np.ndarray, str, dict[str, Any]]:
        assert self._pool is not None
        shot = self._pool.submit(self._screenshot_png)
        ui = self._pool.submit(self.device.shell, dump_ui_command())
        fg = self._pool.submit(self.device.shell, "dumpsys activity activities")
        png, ui_out, activities = shot.result(), ui.result(), fg.result()
        pixels = screen.decode(png, (self.width, self.height))
        meta: dict[str, Any] = {"serial": self.serial}
        try:
            view = parse(extract_xml(ui_out), self._scale)
        except UiDumpError as e:
            view = UiView()
            meta["ui_error"] = str(e)
        self._last_view = view
        foreground = apps_mod.parse_foreground(activities)
        if foreground is not None:
            package, activity = foreground
            app = apps_mod.by_package(package)
            meta.update(package=package, activity=activity, app=app.label if app else None)
        meta["elements"] = len(view.elements)
        events = self.device.take_events()
        if events:
            meta["adb_events"] = events
        return pixels, view.text, meta

    # ------------------------------------------------------------ actions

    def _element_point(self, ref: int) -> tuple[int, int]:
        element = self._element(ref)
        center = element.visible_center(self.width, self.height)
        if center is None:
            raise A.ActionError(f"element {ref} ({element.name!r}) is not on the screen")
        return self._to_device(*center)

    def _commands(self, action: A.Action) -> list[str]:
        """The shell commands of ``action`` (ActionError for what cannot be done)."""
        if isinstance(action, A.Click):
            x, y = self._to_device(action.x, action.y)
            if action.button == "right":
                return [inp.long_press(x, y)]
            if action.button != "left":
                raise A.ActionError("a touch screen has no middle button")
            return [inp.tap(x, y)] * action.count
        if isinstance(action, A.Move):
            raise A.ActionError(
                "move() has no effect on a touch screen (nothing hovers); use click or drag"
            )
        if isinstance(action, A.Drag):
            x, y = self._to_device(action.x, action.y)
            tx, ty = self._to_device(action.to_x, action.to_y)
            return [inp.swipe(x, y, tx, ty)]
        if isinstance(action, A.Scroll):
            x, y = self._to_device(action.x, action.y)
            sx, sy = self._scale
            dx, dy = round(action.dx / sx), round(action.dy / sy)
            return [inp.scroll(x, y, dx, dy, *self.device_size)]
        if isinstance(action, A.TypeText):
            self._check_text(action.text)
            return inp.text_commands(action.text)
        if isinstance(action, A.Key):
            return [inp.key_command(action.combo)]
        if isinstance(action, A.ClickElement):
            return [inp.tap(*self._element_point(action.ref))]
        if isinstance(action, A.TypeElement):
            self._check_text(action.text)
            element = self._element(action.ref)
            if element.role != "textbox":
                raise A.ActionError(
                    f"element {action.ref} ({element.role} {element.name!r}) is not a text box; "
                    "type_element types into text boxes; click it and use type() otherwise"
                )
            typing = inp.text_commands(action.text)  # refuses unsendable text before any tap
            point = self._element_point(action.ref)
            return [inp.tap(*point), inp.clear_field_command(len(element.value or "")), *typing]
        if isinstance(action, A.SelectElement):
            return [inp.tap(*self._element_point(action.ref))]
        if isinstance(action, A.Wait):
            self._wait(action)
            return []
        raise A.ActionError(f"{A.format_action(action)} is not performed on Android")

    def _pick_option(self, action: A.SelectElement) -> None:
        """After a tap on a spinner or menu button: tap the option named ``value``."""
        time.sleep(self.settle_s)
        view = parse(extract_xml(self.device.shell(dump_ui_command())), self._scale)
        folded = action.value.strip().lower()
        option = next((e for e in view.elements if e.name == action.value), None) or next(
            (e for e in view.elements if e.name.strip().lower() == folded), None
        )
        if option is None:
            self.device.shell("input keyevent 4")  # close what the tap opened
            names = ", ".join(repr(e.name) for e in view.elements if e.name) or "none"
            raise A.ActionError(
                f"element {action.ref} opened no option {action.value!r}; options: {names}"
            )
        center = option.visible_center(self.width, self.height)
        if center is None:
            raise A.ActionError(f"the option {action.value!r} is not on the screen")
        self.device.shell(inp.tap(*self._to_device(*center)))
