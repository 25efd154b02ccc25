"""``AdbDeviceSimulator``: a **test double** of an Android device, for machines without emulators.

It is not Android. It is a small, deterministic phone that a real ``adb``
server connects to (``adb connect 127.0.0.1:PORT``) over the real adb
transport protocol (:mod:`env_adapters.android.adbwire`), so the adapter's
whole path (adbutils -> adb server -> wire -> device) runs unchanged; only
the device end is simulated. It listens on 127.0.0.1 only.

What it simulates, enough for the adapter's shell commands and the task suite:

* a shell: ``;``/``&&``/``||`` lists, quoting, ``>``/``>>``/``2>&1``
  redirections, ``*`` globs; ``input tap|swipe|text|keyevent|keycombination``,
  ``uiautomator dump``, ``screencap -p`` (a PNG drawn with Pillow),
  ``am start|force-stop``, ``monkey -p``, ``dumpsys activity activities``,
  ``dumpsys window``, ``wm size``, ``settings get|put|list``,
  ``content query|insert|delete|update``, ``pm clear|list packages``,
  ``getprop``, ``svc``, ``cmd connectivity airplane-mode``, ``cmd uimode night``,
  and ``ls cat rm mkdir printf echo test [ true false sleep`` on a file tree
  under ``/sdcard``;
* apps with the stock packages and activities (:mod:`env_adapters.android.apps`):
  a launcher; Settings (Network & internet: Wi-Fi, Airplane mode; Connected
  devices: Bluetooth; Display: Dark theme, Auto-rotate), Contacts (list,
  editor, details, delete), Clock (alarms, time picker with its text input
  mode, switches), Files (Downloads: open folders, long press to select,
  delete, new folder), Browser (address field, local ``file://`` pages);
  their state lives where Android keeps it: settings, the contacts and
  alarms content providers, files;
* the emulator console (``auth``, ``avd snapshot save|load|list``,
  ``screenrecord screenshot``, ``ping``) on its own loopback port, with an auth
  token, so the snapshot reset path runs too; loading a snapshot drops the adb
  connection, as a real emulator's does;
* faults for tests: :meth:`go_offline` / :meth:`come_back` (the device
  disappears from adb), :meth:`hang` (streams are accepted and never answered).
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import hashlib
import io
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr

from env_adapters.android.adbwire import AdbWireServer
from env_adapters.android.apps import APPS

# ---------------------------------------------------------------- UI nodes


@dataclass
class Node:
    """One view of the simulated screen (what ``uiautomator dump`` lists)."""

    cls: str
    bounds: tuple[int, int, int, int]  # x0, y0, x1, y1
    text: str = ""
    desc: str = ""
    rid: str = ""
    hint: str = ""
    clickable: bool = False
    long_clickable: bool = False
    checkable: bool = False
    checked: bool = False
    focused: bool = False
    selected: bool = False
    enabled: bool = True
    scrollable: bool = False
    style: str = ""  # drawing: title, button, fab, row, dialog, scrim, big
    on_tap: Callable[[], None] | None = None
    on_long: Callable[[], None] | None = None
    children: list[Node] = field(default_factory=list)

    def contains(self, x: int, y: int) -> bool:
        x0, y0, x1, y1 = self.bounds
        return x0 <= x < x1 and y0 <= y < y1

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


W_CLS = "android.widget."


def text_view(bounds, text, *, style="", rid="", desc="") -> Node:
    return Node(W_CLS + "TextView", bounds, text=text, style=style, rid=rid, desc=desc)


def button(bounds, text, on_tap, *, desc="", image=False, style="button") -> Node:
    cls = W_CLS + ("ImageButton" if image else "Button")
    return Node(cls, bounds, text=text, desc=desc, clickable=True, on_tap=on_tap, style=style)


# ---------------------------------------------------------------- pages


@dataclass
class Page:
    """One activity instance on the simulated back stack (data only; views are built)."""

    app: str  # key of APPS
    activity: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    focus: str | None = None
    dialog: dict[str, Any] | None = None
    selection: list[str] = field(default_factory=list)


def _fmt_time(hour: int, minute: int) -> str:
    h12 = hour % 12 or 12
    return f"{h12}:{minute:02d} {'AM' if hour < 12 else 'PM'}"


CONTACTS_URI = "content://com.android.contacts"
ALARMS_URI = "content://com.android.deskclock/alarms"
NAME_MIME = "vnd.android.cursor.item/name"
PHONE_MIME = "vnd.android.cursor.item/phone_v2"
PACKAGES = (
    "com.android.launcher3",
    "com.android.settings",
    "com.android.contacts",
    "com.android.providers.contacts",
    "com.android.deskclock",
    "com.android.documentsui",
    "org.chromium.webview_shell",
    "com.android.shell",
)


@dataclass
class Phone:
    """The whole simulated device state (deep-copied by snapshots)."""

    width: int
    height: int
    settings: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "global": {"wifi_on": "1", "bluetooth_on": "0", "airplane_mode_on": "0"},
            "secure": {"ui_night_mode": "1"},
            "system": {"accelerometer_rotation": "0", "screen_brightness": "128"},
        }
    )
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(
        default_factory=lambda: {
            "/",
            "/sdcard",
            "/sdcard/Download",
            "/sdcard/Documents",
            "/sdcard/Pictures",
            "/sdcard/DCIM",
        }
    )
    raw_contacts: list[dict[str, Any]] = field(default_factory=list)
    data: list[dict[str, Any]] = field(default_factory=list)
    alarms: list[dict[str, Any]] = field(default_factory=list)
    next_id: int = 1
    stack: list[Page] = field(default_factory=list)
    radios_before_airplane: tuple[str, str] = ("1", "0")
    awake: bool = True

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1


class ShellExit(Exception):
    pass


# ---------------------------------------------------------------- the double


class AdbDeviceSimulator:
    """A simulated Android device behind the real adb wire protocol (a test double).

    Args:
        width, height: screen size in pixels.
        console: also serve an emulator console (snapshots, screenshots).
        console_token: the console's auth token.
        snapshot: save the boot state as this snapshot (like the image's ``farm-ready``).
        shell_delay_s: added latency per command (a slower device).
        auth: adb authentication: ``"none"``, ``"accept"`` (any signature) or ``"reject"``.
    """

    def __init__(
        self,
        width: int = 720,
        height: int = 1280,
        *,
        console: bool = True,
        console_token: str = "farm-simulator-token",
        snapshot: str | None = "farm-ready",
        shell_delay_s: float = 0.0,
        auth: str = "none",
    ) -> None:
        self.phone = Phone(width, height)
        self.phone.stack = [Page("home", APPS["home"].activity, "launcher")]
        self.lock = threading.RLock()
        self.shell_delay_s = shell_delay_s
        self.commands: list[str] = []  # every command line run (for tests)
        self.console_log: list[str] = []  # every console command (for tests)
        self.snapshots: dict[str, Phone] = {}
        if snapshot:
            self.snapshots[snapshot] = copy.deepcopy(self.phone)
        self.console_token = console_token
        self._console_enabled = console
        self._console: _ConsoleServer | None = None
        self._png_cache: dict[str, bytes] = {}
        self.wire = AdbWireServer(self._service, self._banner, auth=auth)

    # lifecycle ------------------------------------------------------------

    def start(self) -> AdbDeviceSimulator:
        self.wire.start()
        if self._console_enabled:
            self._console = _ConsoleServer(self)
            self._console.start()
        return self

    @property
    def port(self) -> int:
        return self.wire.port

    @property
    def serial(self) -> str:
        """The serial the adb server gives the device after ``adb connect``."""
        return f"127.0.0.1:{self.wire.port}"

    @property
    def console_port(self) -> int | None:
        return self._console.port if self._console is not None else None

    def close(self) -> None:
        self.wire.close()
        if self._console is not None:
            self._console.close()

    def __enter__(self) -> AdbDeviceSimulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # faults ---------------------------------------------------------------

    def go_offline(self) -> None:
        """The device disappears: connections drop, new ones are refused."""
        self.wire.disconnect()

    def come_back(self) -> None:
        self.wire.frozen.clear()
        self.wire.reconnect()

    def hang(self) -> None:
        """Accept streams and never answer them."""
        self.wire.frozen.set()

    # wire -----------------------------------------------------------------

    def _banner(self) -> bytes:
        return (
            b"device::ro.product.name=farm_sim;ro.product.model=FarmAdbSimulator;"
            b"ro.product.device=farm_sim;features=cmd"
        )

    def _service(self, destination: str) -> bytes:
        if self.shell_delay_s:
            time.sleep(self.shell_delay_s)
        if destination.startswith("shell:"):
            return self.run(destination[len("shell:") :])
        if destination.startswith("exec:"):
            return self.run(destination[len("exec:") :])
        return f"error: the simulator has no service {destination.split(':')[0]!r}\n".encode()

    # the shell ------------------------------------------------------------

    def run(self, line: str) -> bytes:
        """Run a shell command line; its output (stdout and stderr, as ``shell:`` merges them)."""
        with self.lock:
            self.commands.append(line)
            out = io.BytesIO()
            status = 0
            for op, words in _parse(line):
                if (op == "&&" and status != 0) or (op == "||" and status == 0):
                    continue
                status = self._simple(words, out)
            return out.getvalue()

    def _simple(self, words: list[tuple[str, bool]], out: io.BytesIO) -> int:
        argv: list[str] = []
        target: tuple[str, bool] | None = None  # (path, append)
        quiet_err = False
        i = 0
        while i < len(words):
            w, quoted = words[i]
            if not quoted and w in (">", ">>") and i + 1 < len(words):
                target = (words[i + 1][0], w == ">>")
                i += 2
                continue
            if not quoted and w in ("2>", "2>>") and i + 1 < len(words):
                quiet_err = words[i + 1][0] == "/dev/null"
                i += 2
                continue
            if not quoted and w == "2>&1":
                i += 1
                continue
            if not quoted and "*" in w:
                argv += self._glob(w) or [w]
            else:
                argv.append(w)
            i += 1
        if not argv:
            return 0
        buf = io.BytesIO()
        try:
            status = self._command(argv, buf)
        except ShellExit as e:
            buf.write(str(e).encode())
            status = 1
        except Exception as e:  # noqa: BLE001 - a command the double gets wrong: say so
            buf.write(f"{argv[0]}: simulator error: {type(e).__name__}: {e}\n".encode())
            status = 1
        data = buf.getvalue()
        if target is not None and target[0] != "/dev/null":
            path = _norm(target[0])
            self._check_parent(path)
            self.phone.files[path] = (self.phone.files.get(path, b"") if target[1] else b"") + data
        elif target is None and not (quiet_err and status != 0):
            out.write(data)
        return status

    def _glob(self, pattern: str) -> list[str]:
        path = _norm(pattern)
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        return sorted(
            f"{parent.rstrip('/')}/{n}" for n in self._children(parent) if fnmatch.fnmatch(n, name)
        )

    # files -----------------------------------------------------------------

    def _children(self, directory: str) -> list[str]:
        prefix = directory.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/")[0] for p in [*self.phone.files, *self.phone.dirs]}
        return sorted(
            n
            for n in names
            if n and any(p.startswith(prefix + n) for p in [*self.phone.files, *self.phone.dirs])
        )

    def _check_parent(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0] or "/"
        if parent not in self.phone.dirs:
            raise ShellExit(f"sh: can't create {path}: No such file or directory\n")

    def _remove(self, path: str, recursive: bool) -> bool:
        ph = self.phone
        if path in ph.files:
            del ph.files[path]
            return True
        if path in ph.dirs:
            if not recursive:
                raise ShellExit(f"rm: {path}: is a directory\n")
            prefix = path + "/"
            ph.files = {p: v for p, v in ph.files.items() if not p.startswith(prefix)}
            ph.dirs = {d for d in ph.dirs if d != path and not d.startswith(prefix)}
            return True
        return False

    # commands --------------------------------------------------------------

    def _command(self, argv: list[str], out: io.BytesIO) -> int:
        name, args = argv[0], argv[1:]
        handler = getattr(self, "_cmd_" + name.replace("-", "_"), None)
        if name == "[":
            handler = self._cmd_test
            args = args[:-1] if args and args[-1] == "]" else args
        if handler is None:
            out.write(f"/system/bin/sh: {name}: inaccessible or not found\n".encode())
            return 127
        return int(handler(args, out) or 0)

    def _cmd_true(self, args, out):
        return 0

    def _cmd_false(self, args, out):
        return 1

    def _cmd_sleep(self, args, out):
        time.sleep(min(float(args[0]) if args else 0, 0.2))

    def _cmd_echo(self, args, out):
        out.write((" ".join(args) + "\n").encode())

    def _cmd_printf(self, args, out):
        if not args:
            return 1
        fmt, rest = args[0], args[1:]
        if fmt == "%s":
            out.write("".join(rest).encode())
        else:
            out.write(fmt.replace("\\n", "\n").encode())

    def _cmd_test(self, args, out):
        if len(args) == 2:
            path = _norm(args[1])
            ph = self.phone
            ok = {
                "-d": path in ph.dirs,
                "-f": path in ph.files,
                "-e": path in ph.dirs or path in ph.files,
            }.get(args[0], False)
            return 0 if ok else 1
        return 1

    def _cmd_cat(self, args, out):
        status = 0
        for a in args:
            path = _norm(a)
            if path in self.phone.files:
                out.write(self.phone.files[path])
            else:
                out.write(f"cat: {a}: No such file or directory\n".encode())
                status = 1
        return status

    def _cmd_ls(self, args, out):
        paths = [a for a in args if not a.startswith("-")] or ["/sdcard"]
        status = 0
        for a in paths:
            path = _norm(a)
            if path in self.phone.files:
                out.write(f"{a}\n".encode())
            elif path in self.phone.dirs:
                for n in self._children(path):
                    out.write(f"{n}\n".encode())
            else:
                out.write(f"ls: {a}: No such file or directory\n".encode())
                status = 1
        return status

    def _cmd_rm(self, args, out):
        flags = "".join(a[1:] for a in args if a.startswith("-"))
        status = 0
        for a in (a for a in args if not a.startswith("-")):
            if "*" in a:
                continue  # an unmatched glob (nothing to remove)
            if not self._remove(_norm(a), "r" in flags) and "f" not in flags:
                out.write(f"rm: {a}: No such file or directory\n".encode())
                status = 1
        return status

    def _cmd_mkdir(self, args, out):
        parents = "-p" in args
        for a in (a for a in args if not a.startswith("-")):
            path = _norm(a)
            if parents:
                parts = path.strip("/").split("/")
                for i in range(1, len(parts) + 1):
                    self.phone.dirs.add("/" + "/".join(parts[:i]))
            else:
                self._check_parent(path)
                if path in self.phone.dirs:
                    out.write(f"mkdir: '{a}': File exists\n".encode())
                    return 1
                self.phone.dirs.add(path)

    def _cmd_getprop(self, args, out):
        props = {
            "sys.boot_completed": "1",
            "ro.build.version.sdk": "34",
            "ro.build.version.release": "14",
            "ro.product.model": "FarmAdbSimulator",
            "ro.kernel.qemu": "1",
        }
        if args:
            out.write((props.get(args[0], "") + "\n").encode())
        else:
            out.write("".join(f"[{k}]: [{v}]\n" for k, v in props.items()).encode())

    def _cmd_wm(self, args, out):
        if args[:1] == ["size"]:
            out.write(f"Physical size: {self.phone.width}x{self.phone.height}\n".encode())
        elif args[:1] == ["density"]:
            out.write(b"Physical density: 320\n")
        else:
            return 1

    def _cmd_settings(self, args, out):
        if len(args) < 2 or args[1] not in self.phone.settings:
            out.write(b"usage: settings [--user N] get|put|delete|list NAMESPACE [KEY [VALUE]]\n")
            return 1
        verb, table = args[0], self.phone.settings[args[1]]
        if verb == "get" and len(args) == 3:
            out.write((table.get(args[2], "null") + "\n").encode())
        elif verb == "put" and len(args) >= 4:
            self._put_setting(args[1], args[2], args[3])
        elif verb == "delete" and len(args) == 3:
            table.pop(args[2], None)
        elif verb == "list":
            out.write("".join(f"{k}={v}\n" for k, v in sorted(table.items())).encode())
        else:
            return 1

    def _put_setting(self, namespace: str, key: str, value: str) -> None:
        ph = self.phone
        g = ph.settings["global"]
        if namespace == "global" and key == "airplane_mode_on" and value != g["airplane_mode_on"]:
            if value == "1":
                ph.radios_before_airplane = (g["wifi_on"], g["bluetooth_on"])
                g["wifi_on"], g["bluetooth_on"] = "0", "0"
            else:
                g["wifi_on"], g["bluetooth_on"] = ph.radios_before_airplane
        ph.settings[namespace][key] = value

    def _cmd_svc(self, args, out):
        keys = {"wifi": "wifi_on", "bluetooth": "bluetooth_on"}
        if len(args) == 2 and args[0] in keys and args[1] in ("enable", "disable"):
            self._put_setting("global", keys[args[0]], "1" if args[1] == "enable" else "0")
            return 0
        out.write(b"usage: svc wifi|bluetooth enable|disable\n")
        return 1

    def _cmd_cmd(self, args, out):
        if args[:2] == ["connectivity", "airplane-mode"] and len(args) == 3:
            self._put_setting("global", "airplane_mode_on", "1" if args[2] == "enable" else "0")
        elif args[:2] == ["uimode", "night"] and len(args) == 3:
            self._put_setting("secure", "ui_night_mode", "2" if args[2] == "yes" else "1")
            out.write(f"Night mode: {args[2]}\n".encode())
        else:
            out.write(f"cmd: no service {' '.join(args[:1])!r} in the simulator\n".encode())
            return 1

    def _cmd_pm(self, args, out):
        if args[:1] == ["clear"] and len(args) == 2:
            pkg = args[1]
            if pkg not in PACKAGES:
                out.write(b"Failed\n")
                return 1
            ph = self.phone
            if pkg == "com.android.providers.contacts":
                ph.raw_contacts, ph.data = [], []
            elif pkg == "com.android.deskclock":
                ph.alarms = []
            ph.stack = [p for p in ph.stack if APPS[p.app].package != pkg] or [self._home()]
            out.write(b"Success\n")
        elif args[:2] == ["list", "packages"]:
            out.write("".join(f"package:{p}\n" for p in PACKAGES).encode())
        else:
            return 1

    def _cmd_am(self, args, out):
        if args[:1] == ["start"]:
            comp = args[args.index("-n") + 1] if "-n" in args else None
            app = next((k for k, a in APPS.items() if a.component == comp), None)
            if app is None:
                out.write(f"Error: Activity class {{{comp}}} does not exist.\n".encode())
                return 1
            self._launch(app)
            out.write(f"Starting: Intent {{ cmp={comp} }}\n".encode())
            if "-W" in args:
                out.write(f"Status: ok\nActivity: {comp}\nTotalTime: 12\nComplete\n".encode())
        elif args[:1] == ["force-stop"] and len(args) == 2:
            ph = self.phone
            ph.stack = [p for p in ph.stack if APPS[p.app].package != args[1]] or [self._home()]
        else:
            return 1

    def _cmd_monkey(self, args, out):
        pkg = args[args.index("-p") + 1] if "-p" in args else None
        app = next((k for k, a in APPS.items() if a.package == pkg), None)
        if app is None:
            out.write(b"** No activities found to run, monkey aborted.\n")
            return 1
        self._launch(app)
        out.write(b"Events injected: 1\n")

    def _cmd_dumpsys(self, args, out):
        page = self.phone.stack[-1]
        comp = APPS[page.app].package + "/" + page.activity
        if args[:1] == ["activity"]:
            out.write(
                "ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)\n"
                "Display #0 (activities from top to bottom):\n"
                f"  * Task{{1a2b3c #{len(self.phone.stack)} type=standard}}\n"
                f"    mResumedActivity: ActivityRecord{{5f1e2d u0 {comp} t12}}\n".encode()
            )
        elif args[:1] == ["window"]:
            out.write(
                f"WINDOW MANAGER WINDOWS (dumpsys window windows)\n"
                f"  mCurrentFocus=Window{{7c3d u0 {comp}}}\n"
                f"  mFocusedApp=ActivityRecord{{5f1e2d u0 {comp} t12}}\n".encode()
            )
        elif args[:1] == ["display"]:
            ph = self.phone
            out.write(
                f"DISPLAY MANAGER (dumpsys display)\n  mDisplayInfos=\n    DisplayInfo{{"
                f'"Built-in Screen", displayId 0, real {ph.width} x {ph.height}, '
                f"rotation 0}}\n  mOverrideDisplayInfo=DisplayInfo{{orientation=0}}\n".encode()
            )

    def _cmd_content(self, args, out):
        return _content(self, args, out)

    def _cmd_uiautomator(self, args, out):
        if args[:1] != ["dump"]:
            out.write(b"Usage: uiautomator dump [--compressed] [FILE]\n")
            return 1
        path = _norm(
            next((a for a in args[1:] if not a.startswith("-")), "/sdcard/window_dump.xml")
        )
        self._check_parent(path)
        self.phone.files[path] = self.hierarchy_xml().encode()
        out.write(f"UI hierchary dumped to: {path}\n".encode())

    def _cmd_screencap(self, args, out):
        png = self.screenshot_png()
        target = next((a for a in args if not a.startswith("-")), None)
        if target:
            self.phone.files[_norm(target)] = png
        else:
            out.write(png)

    def _cmd_input(self, args, out):
        if not args:
            return 1
        if args[0] in ("touchscreen", "keyboard"):
            args = args[1:]
        verb, rest = args[0], args[1:]
        ph = self.phone
        if verb in ("tap", "swipe", "text") and not ph.awake:
            return 0
        if verb == "tap" and len(rest) == 2:
            self._touch(int(float(rest[0])), int(float(rest[1])), long=False)
        elif verb == "swipe" and len(rest) >= 4:
            x0, y0, x1, y1 = (int(float(v)) for v in rest[:4])
            ms = int(rest[4]) if len(rest) > 4 else 300
            if abs(x1 - x0) < 10 and abs(y1 - y0) < 10:
                self._touch(x0, y0, long=ms >= 500)
        elif verb == "text" and len(rest) == 1:
            self._type(rest[0].replace("%s", " "))
        elif verb == "keyevent":
            for code in (c for c in rest if not c.startswith("--")):
                self._key(_keycode(code))
        elif verb == "keycombination":
            pass  # no shortcuts in the simulated apps
        else:
            out.write(f"Error: unknown input command {verb!r}\n".encode())
            return 1

    # UI: state changes ------------------------------------------------------

    def _home(self) -> Page:
        return Page("home", APPS["home"].activity, "launcher")

    def _launch(self, app: str) -> None:
        roots = {
            "home": "launcher",
            "settings": "settings",
            "contacts": "contacts",
            "clock": "alarms",
            "files": "files",
            "browser": "browser",
        }
        self.phone.awake = True
        if app == "home":
            self.phone.stack = [self._home()]
            return
        page = Page(app, APPS[app].activity, roots[app])
        if app == "files":
            page.params["dir"] = "/sdcard/Download"
        self.phone.stack = [self._home(), page]

    def _push(self, app: str, activity: str, kind: str, **params: Any) -> None:
        self.phone.stack.append(Page(app, activity, kind, params))

    def _back(self) -> None:
        ph = self.phone
        page = ph.stack[-1]
        if page.dialog is not None:
            page.dialog = None
        elif page.selection:
            page.selection = []
        elif page.kind == "files" and page.params["dir"] != "/sdcard/Download":
            page.params["dir"] = page.params["dir"].rsplit("/", 1)[0]
        elif len(ph.stack) > 1:
            ph.stack.pop()

    def _key(self, code: int) -> None:
        ph = self.phone
        page = ph.stack[-1]
        if code == 3:
            ph.stack = [self._home()]
        elif code == 4:
            self._back()
        elif code == 224:
            ph.awake = True
        elif code == 223:
            ph.awake = False
        elif code == 26:
            ph.awake = not ph.awake
        elif code == 67 and page.focus is not None:
            page.fields[page.focus] = page.fields.get(page.focus, "")[:-1]
        elif code == 66 and page.focus is not None:
            if page.kind == "browser" and page.focus == "url":
                self._navigate(page, page.fields.get("url", ""))
        elif code in _CHAR_OF_CODE and page.focus is not None:
            self._type(_CHAR_OF_CODE[code])

    def _type(self, text: str) -> None:
        page = self.phone.stack[-1]
        if page.focus is not None:
            page.fields[page.focus] = page.fields.get(page.focus, "") + text

    def _touch(self, x: int, y: int, long: bool) -> None:
        hit = None
        for node in self.nodes():
            for n in node.walk():
                if n.contains(x, y) and n.enabled and (n.long_clickable if long else n.clickable):
                    hit = n
        if hit is None and long:  # a long press on a plain clickable view is a click
            for node in self.nodes():
                for n in node.walk():
                    if n.contains(x, y) and n.enabled and n.clickable:
                        hit = n
            if hit is not None and hit.on_tap is not None:
                hit.on_tap()
            return
        if hit is not None:
            callback = hit.on_long if long else hit.on_tap
            if callback is not None:
                callback()

    def _navigate(self, page: Page, url: str) -> None:
        url = url.strip()
        if url and "://" not in url:
            url = "http://" + url
        page.fields["url"] = url
        page.params["url"] = url
        page.focus = None
        page.params["history"] = [*page.params.get("history", []), url]

    # UI: views --------------------------------------------------------------

    def nodes(self) -> list[Node]:
        """The views on the screen, top-level first, each with its children."""
        ph = self.phone
        page = ph.stack[-1]
        views = _APPS_UI[page.kind](self, page)
        if page.dialog is not None:
            views.append(Node(W_CLS + "FrameLayout", (0, 0, ph.width, ph.height), style="scrim"))
            views += _dialog(self, page)
        return views

    def hierarchy_xml(self) -> str:
        """The screen as ``uiautomator dump`` writes it."""
        ph = self.phone
        page = ph.stack[-1]
        pkg = APPS[page.app].package
        parts = [
            "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"
        ]
        root = Node(W_CLS + "FrameLayout", (0, 0, ph.width, ph.height), children=self.nodes())
        counter = [0]

        def emit(n: Node, index: int) -> None:
            counter[0] += 1
            x0, y0, x1, y1 = n.bounds
            attrs = {
                "index": str(index),
                "text": n.text,
                "resource-id": n.rid,
                "class": n.cls,
                "package": pkg,
                "content-desc": n.desc,
                "checkable": _b(n.checkable),
                "checked": _b(n.checked),
                "clickable": _b(n.clickable),
                "enabled": _b(n.enabled),
                "focusable": _b(n.clickable or n.cls.endswith("EditText")),
                "focused": _b(n.focused),
                "scrollable": _b(n.scrollable),
                "long-clickable": _b(n.long_clickable),
                "password": "false",
                "selected": _b(n.selected),
                "hint": n.hint,
                "bounds": f"[{x0},{y0}][{x1},{y1}]",
            }
            parts.append("<node " + " ".join(f"{k}={quoteattr(v)}" for k, v in attrs.items()))
            if n.children:
                parts.append(">")
                for i, c in enumerate(n.children):
                    emit(c, i)
                parts.append("</node>")
            else:
                parts.append(" />")

        emit(root, 0)
        parts.append("</hierarchy>")
        return "".join(parts)

    def screenshot_png(self) -> bytes:
        """The screen drawn with Pillow, as PNG (cached per distinct screen)."""
        views = self.nodes() if self.phone.awake else []
        key = hashlib.sha1(repr([_render_key(n) for n in views]).encode()).hexdigest()
        png = self._png_cache.get(key)
        if png is None:
            png = _draw(views, self.phone.width, self.phone.height)
            if len(self._png_cache) > 256:
                self._png_cache.clear()
            self._png_cache[key] = png
        return png

    # snapshots --------------------------------------------------------------

    def save_snapshot(self, name: str) -> None:
        with self.lock:
            self.snapshots[name] = copy.deepcopy(self.phone)

    def load_snapshot(self, name: str) -> None:
        with self.lock:
            self.phone = copy.deepcopy(self.snapshots[name])
        self.wire.drop_connections()  # as an emulator's adbd restarts with the loaded state


def _b(v: bool) -> str:
    return "true" if v else "false"


def _norm(path: str) -> str:
    if path.startswith("/storage/emulated/0"):
        path = "/sdcard" + path[len("/storage/emulated/0") :]
    if path.startswith("/storage/self/primary"):
        path = "/sdcard" + path[len("/storage/self/primary") :]
    parts: list[str] = []
    for p in path.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            if parts:
                parts.pop()
            continue
        parts.append(p)
    return "/" + "/".join(parts)


_KEYCODES = {
    "KEYCODE_HOME": 3,
    "KEYCODE_BACK": 4,
    "KEYCODE_ENTER": 66,
    "KEYCODE_DEL": 67,
    "KEYCODE_MOVE_END": 123,
    "KEYCODE_WAKEUP": 224,
    "KEYCODE_SLEEP": 223,
    "KEYCODE_POWER": 26,
    "KEYCODE_SPACE": 62,
    "KEYCODE_TAB": 61,
}
_CHAR_OF_CODE = {
    **{29 + i: chr(ord("a") + i) for i in range(26)},
    **{7 + i: str(i) for i in range(10)},
    62: " ",
    55: ",",
    56: ".",
    69: "-",
    76: "/",
    77: "@",
}


def _keycode(text: str) -> int:
    if text.isdigit():
        return int(text)
    if text in _KEYCODES:
        return _KEYCODES[text]
    if text.startswith("KEYCODE_") and len(text) == 9 and text[-1].isalpha():
        return 29 + ord(text[-1].lower()) - ord("a")
    return -1


# ---------------------------------------------------------------- the shell parser


def _parse(line: str) -> list[tuple[str, list[tuple[str, bool]]]]:
    """``line`` as (operator before it, words) simple commands; words are (text, quoted)."""
    commands: list[tuple[str, list[tuple[str, bool]]]] = []
    words: list[tuple[str, bool]] = []
    op = ";"
    cur, quoted, has = "", False, False
    i, n = 0, len(line)

    def end_word() -> None:
        nonlocal cur, quoted, has
        if has:
            words.append((cur, quoted))
        cur, quoted, has = "", False, False

    while i < n:
        c = line[i]
        if c == "'":
            j = line.index("'", i + 1)
            cur += line[i + 1 : j]
            quoted = has = True
            i = j + 1
        elif c == '"':
            i += 1
            while i < n and line[i] != '"':
                if line[i] == "\\" and i + 1 < n and line[i + 1] in '"\\$`':
                    i += 1
                cur += line[i]
                i += 1
            quoted = has = True
            i += 1
        elif c == "\\" and i + 1 < n:
            cur += line[i + 1]
            quoted = has = True
            i += 2
        elif c in " \t\n":
            end_word()
            i += 1
        elif c in ";&|":
            end_word()
            two = line[i : i + 2]
            if two in ("&&", "||"):
                commands.append((op, words))
                op, words = two, []
                i += 2
            else:
                commands.append((op, words))
                op, words = ";", []
                i += 1
        elif c == ">" or (c == "2" and not has and line[i + 1 : i + 2] == ">"):
            end_word()
            for token in ("2>&1", "2>>", "2>", ">>", ">"):
                if line.startswith(token, i):
                    words.append((token, False))
                    i += len(token)
                    break
        else:
            cur += c
            has = True
            i += 1
    end_word()
    commands.append((op, words))
    return [(o, w) for o, w in commands if w]


# ---------------------------------------------------------------- content providers


def _where(clause: str | None) -> Callable[[dict[str, Any]], bool]:
    if not clause:
        return lambda row: True
    tests = []
    for part in re.split(r"\s+AND\s+", clause.strip(), flags=re.IGNORECASE):
        m = re.fullmatch(r"\s*(\w+)\s*=\s*(?:'([^']*)'|\"([^\"]*)\"|(\S+))\s*", part)
        if m is None:
            raise ShellExit(f"Error while accessing provider: unsupported where clause {part!r}\n")
        col, value = m.group(1), next(g for g in m.groups()[1:] if g is not None)
        tests.append((col, value))
    return lambda row: all(str(row.get(c)) == v for c, v in tests)


def _content(sim: AdbDeviceSimulator, args: list[str], out: io.BytesIO) -> int:
    if not args:
        out.write(b"usage: content [query|insert|update|delete] --uri URI ...\n")
        return 1
    verb, opts = args[0], args[1:]
    uri, projection, where, binds = None, None, None, {}
    i = 0
    while i < len(opts):
        o = opts[i]
        value = opts[i + 1] if i + 1 < len(opts) else ""
        if o == "--uri":
            uri = value
        elif o == "--projection":
            projection = value.split(":")
        elif o == "--where":
            where = value
        elif o == "--bind":
            name, kind, v = value.split(":", 2)
            binds[name] = None if kind == "n" else int(v) if kind in ("i", "l") else v
        elif o in ("--sort", "--user"):
            pass
        i += 2
    ph = sim.phone
    table = _table(ph, uri)
    if table is None:
        out.write(
            f"Error while accessing provider:{uri}\n"
            f"java.lang.IllegalArgumentException: Unknown URI {uri}\n".encode()
        )
        return 1
    name, rows = table
    match = _where(where)
    if verb == "query":
        found = [r for r in rows if match(r)]
        if not found:
            out.write(b"No result found.\n")
            return 0
        for i, r in enumerate(found):
            cols = projection or list(r)
            body = ", ".join(f"{c}={'NULL' if r.get(c) is None else r.get(c)}" for c in cols)
            out.write(f"Row: {i} {body}\n".encode())
        return 0
    if verb == "insert":
        _insert(ph, name, binds)
        return 0
    if verb == "delete":
        _delete(ph, name, [r["_id"] for r in rows if match(r)])
        return 0
    if verb == "update":
        for r in rows:
            if match(r):
                _update(ph, name, r["_id"], binds)
        return 0
    out.write(f"Unsupported command: {verb}\n".encode())
    return 1


def _table(ph: Phone, uri: str | None) -> tuple[str, list[dict[str, Any]]] | None:
    if uri in (f"{CONTACTS_URI}/raw_contacts",):
        return "raw_contacts", [dict(r) for r in ph.raw_contacts]
    if uri in (f"{CONTACTS_URI}/contacts",):
        rows = [{"_id": r["_id"], "display_name": r["display_name"]} for r in ph.raw_contacts]
        return "contacts", rows
    if uri in (f"{CONTACTS_URI}/data",):
        names = {r["_id"]: r["display_name"] for r in ph.raw_contacts}
        rows = [{**d, "display_name": names.get(d["raw_contact_id"])} for d in ph.data]
        return "data", rows
    if uri == f"{CONTACTS_URI}/data/phones":
        names = {r["_id"]: r["display_name"] for r in ph.raw_contacts}
        rows = [
            {**d, "display_name": names.get(d["raw_contact_id"]), "number": d["data1"]}
            for d in ph.data
            if d["mimetype"] == PHONE_MIME
        ]
        return "data", rows
    if uri == ALARMS_URI:
        return "alarms", [dict(a) for a in ph.alarms]
    return None


def _insert(ph: Phone, table: str, values: dict[str, Any]) -> int:
    rid = ph.new_id()
    if table in ("raw_contacts", "contacts"):
        ph.raw_contacts.append({"_id": rid, "display_name": None, "deleted": 0})
    elif table == "data":
        row = {
            "_id": rid,
            "raw_contact_id": int(values.get("raw_contact_id", 0)),
            "mimetype": str(values.get("mimetype", "")),
            "data1": str(values.get("data1", "")),
        }
        ph.data.append(row)
        if row["mimetype"] == NAME_MIME:
            for r in ph.raw_contacts:
                if r["_id"] == row["raw_contact_id"]:
                    r["display_name"] = row["data1"]
    elif table == "alarms":
        ph.alarms.append(
            {
                "_id": rid,
                "hour": int(values.get("hour", 0)),
                "minutes": int(values.get("minutes", 0)),
                "enabled": int(values.get("enabled", 1)),
                "label": str(values.get("label", "")),
                "daysofweek": int(values.get("daysofweek", 0)),
                "vibrate": int(values.get("vibrate", 1)),
            }
        )
    return rid


def _delete(ph: Phone, table: str, ids: list[int]) -> None:
    if table in ("raw_contacts", "contacts"):
        ph.raw_contacts = [r for r in ph.raw_contacts if r["_id"] not in ids]
        ph.data = [d for d in ph.data if d["raw_contact_id"] not in ids]
    elif table == "data":
        ph.data = [d for d in ph.data if d["_id"] not in ids]
    elif table == "alarms":
        ph.alarms = [a for a in ph.alarms if a["_id"] not in ids]


def _update(ph: Phone, table: str, rid: int, values: dict[str, Any]) -> None:
    rows = {"alarms": ph.alarms, "data": ph.data, "raw_contacts": ph.raw_contacts}.get(table, [])
    for r in rows:
        if r["_id"] == rid:
            r.update({k: v for k, v in values.items() if k in r})


# ---------------------------------------------------------------- the apps' views

STATUS_H = 48
BAR_H = 112
ROW_H = 120


def _title(sim: AdbDeviceSimulator, text: str) -> Node:
    return text_view((0, STATUS_H, sim.phone.width, STATUS_H + BAR_H), text, style="title")


def _status(sim: AdbDeviceSimulator) -> Node:
    return text_view((sim.phone.width - 120, 0, sim.phone.width, STATUS_H), "12:00", style="status")


def _row(
    sim: AdbDeviceSimulator,
    i: int,
    title: str,
    summary: str,
    on_tap,
    *,
    top=0,
    on_long=None,
    selected=False,
) -> Node:
    w = sim.phone.width
    y0 = (top or STATUS_H + BAR_H) + i * ROW_H
    kids = [text_view((32, y0 + 16, w - 32, y0 + 66), title, rid="android:id/title")]
    if summary:
        kids.append(
            text_view(
                (32, y0 + 66, w - 32, y0 + 106), summary, style="summary", rid="android:id/summary"
            )
        )
    return Node(
        "android.widget.LinearLayout",
        (0, y0, w, y0 + ROW_H),
        clickable=True,
        on_tap=on_tap,
        long_clickable=on_long is not None,
        on_long=on_long,
        selected=selected,
        style="row",
        children=kids,
    )


def _switch(
    sim: AdbDeviceSimulator, i: int, label: str, on: bool, on_tap, *, desc="", top=0
) -> Node:
    w = sim.phone.width
    y0 = (top or STATUS_H + BAR_H) + i * ROW_H
    return Node(
        W_CLS + "Switch",
        (0, y0, w, y0 + ROW_H),
        text=label,
        desc=desc,
        checkable=True,
        checked=on,
        clickable=True,
        on_tap=on_tap,
        rid="android:id/switch_widget",
    )


def _ui_launcher(sim: AdbDeviceSimulator, page: Page) -> list[Node]:
    w = sim.phone.width
    views = [_status(sim)]
    cell = w // 4
    for i, key in enumerate(("settings", "contacts", "clock", "files", "browser")):
        x0, y0 = (i % 4) * cell, 400 + (i // 4) * 220
        label = APPS[key].label
        views.append(
            Node(
                W_CLS + "TextView",
                (x0 + 8, y0, x0 + cell - 8, y0 + 200),
                text=label,
                desc=label,
                clickable=True,
                on_tap=lambda k=key: sim._launch(k),
                style="icon",
            )
        )
    return views


def _ui_settings(sim: AdbDeviceSimulator, page: Page) -> list[Node]:
    ph = sim.phone
    g, s, y = ph.settings["global"], ph.settings["secure"], ph.settings["system"]
    views = [_status(sim)]
    sub = page.params.get("sub")

    def open_sub(name: str) -> Callable[[], None]:
        return lambda: sim._push("settings", ".SubSettings", "settings", sub=name)

    def toggle(ns: str, key: str, on: str = "1", off: str = "0") -> Callable[[], None]:
        table = ph.settings[ns]
        return lambda: sim._put_setting(ns, key, off if table.get(key) == on else on)

    if sub is None:
        views.append(_title(sim, "Settings"))
        rows = [
            ("Network & internet", "Wi-Fi, mobile, data usage, hotspot", open_sub("network")),
            ("Connected devices", "Bluetooth, pairing", open_sub("devices")),
            ("Apps", "Recent apps, default apps", open_sub("apps")),
            ("Display", "Dark theme, font size, brightness", open_sub("display")),
            ("Storage", "Used 9.1 GB, free 6.9 GB", open_sub("storage")),
            ("About emulated device", "sdk_gphone64_x86_64", open_sub("about")),
        ]
        views += [_row(sim, i, *r) for i, r in enumerate(rows)]
    elif sub == "network":
        views.append(_title(sim, "Network & internet"))
        views.append(_switch(sim, 0, "Wi-Fi", g["wifi_on"] == "1", toggle("global", "wifi_on")))
        views.append(_row(sim, 1, "Mobile network", "T-Mobile", lambda: None))
        views.append(_row(sim, 2, "Hotspot & tethering", "Off", lambda: None))
        views.append(
            _switch(
                sim,
                3,
                "Airplane mode",
                g["airplane_mode_on"] == "1",
                toggle("global", "airplane_mode_on"),
            )
        )
        views.append(_row(sim, 4, "Data Saver", "Off", lambda: None))
    elif sub == "devices":
        views.append(_title(sim, "Connected devices"))
        views.append(_row(sim, 0, "Pair new device", "", lambda: None))
        views.append(
            _switch(sim, 1, "Bluetooth", g["bluetooth_on"] == "1", toggle("global", "bluetooth_on"))
        )
    elif sub == "display":
        views.append(_title(sim, "Display"))
        views.append(
            _row(
                sim,
                0,
                "Brightness level",
                f"{int(y['screen_brightness']) * 100 // 255}%",
                lambda: None,
            )
        )
        views.append(
            _switch(
                sim,
                1,
                "Dark theme",
                s.get("ui_night_mode") == "2",
                toggle("secure", "ui_night_mode", "2", "1"),
            )
        )
        views.append(_row(sim, 2, "Font size", "Default", lambda: None))
        views.append(
            _switch(
                sim,
                3,
                "Auto-rotate screen",
                y.get("accelerometer_rotation") == "1",
                toggle("system", "accelerometer_rotation"),
            )
        )
    else:
        views.append(
            _title(sim, {"apps": "Apps", "storage": "Storage"}.get(sub, "About emulated device"))
        )
        views.append(text_view((32, 200, ph.width - 32, 260), "Nothing to change here"))
    return views


def _contact_rows(ph: Phone) -> list[tuple[int, str, str]]:
    phones = {d["raw_contact_id"]: d["data1"] for d in ph.data if d["mimetype"] == PHONE_MIME}
    rows = [
        (r["_id"], r["display_name"] or "(no name)", phones.get(r["_id"], ""))
        for r in ph.raw_contacts
    ]
    return sorted(rows, key=lambda r: r[1].lower())


def _fab(sim: AdbDeviceSimulator, desc: str, on_tap) -> Node:
    w, h = sim.phone.width, sim.phone.height
    return button(
        (w - 200, h - 220, w - 48, h - 68), "", on_tap, desc=desc, image=True, style="fab"
    )


def _field(
    sim: AdbDeviceSimulator,
    page: Page,
    key: str,
    hint: str,
    y0: int,
    x0: int = 32,
    x1: int | None = None,
) -> Node:
    def focus() -> None:
        page.focus = key

    return Node(
        W_CLS + "EditText",
        (x0, y0, x1 or sim.phone.width - 32, y0 + 96),
        text=page.fields.get(key, ""),
        hint=hint,
        clickable=True,
        focused=page.focus == key,
        on_tap=focus,
        rid=f"{APPS[page.app].package}:id/{key}",
    )


def _ui_contacts(sim: AdbDeviceSimulator, page: Page) -> list[Node]:
    ph = sim.phone
    views = [_status(sim)]
    if page.kind == "contacts":
        views.append(_title(sim, "Contacts"))
        rows = _contact_rows(ph)
        if not rows:
            views.append(text_view((32, 300, ph.width - 32, 360), "No contacts yet"))
        for i, (cid, name, _) in enumerate(rows[:8]):
            views.append(
                _row(
                    sim,
                    i,
                    name,
                    "",
                    lambda c=cid: sim._push(
                        "contacts", ".quickcontact.QuickContactActivity", "contact", id=c
                    ),
                )
            )
        views.append(
            _fab(
                sim,
                "Create contact",
                lambda: sim._push("contacts", ".activities.ContactEditorActivity", "editor"),
            )
        )
    elif page.kind == "editor":
        views.append(_title(sim, "Create contact"))
        views.append(
            button(
                (16, STATUS_H + 16, 112, STATUS_H + 96),
                "",
                sim._back,
                desc="Cancel",
                image=True,
                style="flat",
            )
        )
        views.append(
            button(
                (ph.width - 192, STATUS_H + 16, ph.width - 16, STATUS_H + 96),
                "Save",
                lambda: _save_contact(sim, page),
            )
        )
        for i, (key, hint) in enumerate(
            (("first", "First name"), ("last", "Last name"), ("phone", "Phone"))
        ):
            views.append(_field(sim, page, key, hint, 220 + i * 140))
        if page.params.get("error"):
            views.append(
                text_view((32, 660, ph.width - 32, 710), page.params["error"], style="error")
            )
    else:  # one contact
        cid = page.params["id"]
        row = next((r for r in _contact_rows(ph) if r[0] == cid), None)
        if row is None:
            sim._back()
            return _ui_contacts(sim, ph.stack[-1])
        views.append(
            button(
                (16, STATUS_H + 16, 112, STATUS_H + 96),
                "",
                sim._back,
                desc="Navigate up",
                image=True,
                style="flat",
            )
        )
        views.append(
            button(
                (ph.width - 112, STATUS_H + 16, ph.width - 16, STATUS_H + 96),
                "",
                lambda: _open_dialog(page, "contact-menu"),
                desc="More options",
                image=True,
                style="flat",
            )
        )
        views.append(
            text_view(
                (32, 260, ph.width - 32, 360),
                row[1],
                style="big",
                rid="com.android.contacts:id/large_title",
            )
        )
        if row[2]:
            views.append(_row(sim, 0, row[2], "Mobile", lambda: None, top=420))
    return views


def _save_contact(sim: AdbDeviceSimulator, page: Page) -> None:
    first, last = page.fields.get("first", "").strip(), page.fields.get("last", "").strip()
    phone = page.fields.get("phone", "").strip()
    name = " ".join(p for p in (first, last) if p)
    if not name and not phone:
        page.params["error"] = "Enter a name or a phone number"
        return
    ph = sim.phone
    rid = _insert(ph, "raw_contacts", {})
    _insert(ph, "data", {"raw_contact_id": rid, "mimetype": NAME_MIME, "data1": name or phone})
    if phone:
        _insert(ph, "data", {"raw_contact_id": rid, "mimetype": PHONE_MIME, "data1": phone})
    ph.stack.pop()
    sim._push("contacts", ".quickcontact.QuickContactActivity", "contact", id=rid)


def _open_dialog(page: Page, kind: str, **params: Any) -> None:
    page.dialog = {"kind": kind, **params}
    page.focus = None


def _ui_clock(sim: AdbDeviceSimulator, page: Page) -> list[Node]:
    ph = sim.phone
    w = ph.width
    views = [_status(sim)]
    tab = page.params.get("tab", "Alarm")
    for i, name in enumerate(("Alarm", "Clock", "Timer", "Stopwatch")):
        views.append(
            Node(
                W_CLS + "TextView",
                (i * w // 4, ph.height - 140, (i + 1) * w // 4, ph.height - 40),
                text=name,
                desc=name,
                clickable=True,
                selected=name == tab,
                on_tap=lambda n=name: page.params.__setitem__("tab", n),
                style="tab",
            )
        )
    if tab != "Alarm":
        views.append(_title(sim, tab))
        views.append(text_view((32, 400, w - 32, 520), "12:00", style="big"))
        return views
    views.append(_title(sim, "Alarm"))
    alarms = sorted(ph.alarms, key=lambda a: (a["hour"], a["minutes"], a["_id"]))
    if not alarms:
        views.append(text_view((32, 300, w - 32, 360), "No alarms"))
    for i, a in enumerate(alarms[:7]):
        y0 = STATUS_H + BAR_H + i * 150
        label = _fmt_time(a["hour"], a["minutes"])

        def flip(alarm_id=a["_id"]) -> None:
            for x in ph.alarms:
                if x["_id"] == alarm_id:
                    x["enabled"] = 0 if x["enabled"] else 1

        views.append(
            text_view(
                (32, y0 + 10, w - 200, y0 + 90),
                label,
                style="big",
                rid="com.android.deskclock:id/digital_clock",
            )
        )
        if a["label"]:
            views.append(text_view((32, y0 + 90, w - 200, y0 + 140), a["label"], style="summary"))
        views.append(
            Node(
                W_CLS + "Switch",
                (w - 180, y0 + 20, w - 32, y0 + 110),
                desc=f"{label} alarm",
                checkable=True,
                checked=bool(a["enabled"]),
                clickable=True,
                on_tap=flip,
                rid="com.android.deskclock:id/onoff",
            )
        )
    views.append(_fab(sim, "Add alarm", lambda: _open_dialog(page, "time-picker", mode="clock")))
    return views


def _files_entries(sim: AdbDeviceSimulator, directory: str) -> list[tuple[str, bool]]:
    ph = sim.phone
    names = sim._children(directory)
    entries = [(n, f"{directory}/{n}" in ph.dirs) for n in names]
    return sorted(entries, key=lambda e: (not e[1], e[0].lower()))


def _ui_files(sim: AdbDeviceSimulator, page: Page) -> list[Node]:
    ph = sim.phone
    w = ph.width
    directory = page.params["dir"]
    views = [_status(sim)]
    if page.selection:
        views.append(_title(sim, f"{len(page.selection)} selected"))
        views.append(
            button(
                (w - 224, STATUS_H + 16, w - 128, STATUS_H + 96),
                "",
                lambda: _open_dialog(page, "delete-files"),
                desc="Delete",
                image=True,
                style="flat",
            )
        )
        views.append(
            button(
                (w - 112, STATUS_H + 16, w - 16, STATUS_H + 96),
                "",
                lambda: page.selection.clear(),
                desc="Close",
                image=True,
                style="flat",
            )
        )
    else:
        views.append(_title(sim, directory.rsplit("/", 1)[-1].replace("Download", "Downloads")))
        views.append(
            button(
                (w - 112, STATUS_H + 16, w - 16, STATUS_H + 96),
                "",
                lambda: _open_dialog(page, "files-menu"),
                desc="More options",
                image=True,
                style="flat",
            )
        )
    entries = _files_entries(sim, directory)
    if not entries:
        views.append(text_view((32, 300, w - 32, 360), "No items"))
    for i, (name, is_dir) in enumerate(entries[:8]):
        path = f"{directory}/{name}"
        size = len(ph.files.get(path, b""))

        def tap(path=path, is_dir=is_dir) -> None:
            if page.selection:
                _toggle_selection(page, path)
            elif is_dir:
                page.params["dir"] = path

        views.append(
            _row(
                sim,
                i,
                name,
                "Folder" if is_dir else f"{size} B",
                tap,
                on_long=lambda path=path: _toggle_selection(page, path),
                selected=path in page.selection,
            )
        )
    return views


def _toggle_selection(page: Page, path: str) -> None:
    if path in page.selection:
        page.selection.remove(path)
    else:
        page.selection.append(path)


def _page_text(html: str) -> tuple[str, list[str]]:
    title = re.search(r"<title>(.*?)</title>", html, re.S | re.I)
    body = re.sub(r"<title>.*?</title>", "", html, flags=re.S | re.I)
    lines = [re.sub(r"\s+", " ", t).strip() for t in re.split(r"<[^>]+>", body)]
    return (title.group(1).strip() if title else ""), [t for t in lines if t]


def _ui_browser(sim: AdbDeviceSimulator, page: Page) -> list[Node]:
    ph = sim.phone
    w = ph.width
    views = [_status(sim), _field(sim, page, "url", "Enter URL", STATUS_H + 8, 16, w - 16)]
    views[-1].rid = "org.chromium.webview_shell:id/url_field"
    url = page.params.get("url")
    kids: list[Node] = []
    desc = ""
    if url:
        if url.startswith("file://") and _norm(url[len("file://") :]) in ph.files:
            html = ph.files[_norm(url[len("file://") :])].decode(errors="replace")
            desc, lines = _page_text(html)
        else:
            desc, lines = (
                "Web page not available",
                [
                    "Webpage not available",
                    f"The webpage at {url} could not be loaded because: net::ERR_NAME_NOT_RESOLVED",
                ],
            )
        kids = [
            text_view((24, 200 + i * 70, w - 24, 260 + i * 70), t) for i, t in enumerate(lines[:12])
        ]
    views.append(
        Node(
            "android.webkit.WebView",
            (0, 170, w, ph.height),
            desc=desc,
            children=kids,
            scrollable=bool(url),
        )
    )
    return views


def _dialog(sim: AdbDeviceSimulator, page: Page) -> list[Node]:
    ph = sim.phone
    w = ph.width
    d = page.dialog or {}
    kind = d["kind"]
    box = (48, 380, w - 48, 900)
    views = [Node(W_CLS + "FrameLayout", box, style="dialog")]

    def close() -> None:
        page.dialog = None

    def buttons(ok_text: str, ok, cancel_text: str = "Cancel") -> list[Node]:
        return [
            button(
                (box[2] - 400, box[3] - 110, box[2] - 220, box[3] - 20),
                cancel_text,
                close,
                style="flat",
            ),
            button(
                (box[2] - 200, box[3] - 110, box[2] - 20, box[3] - 20), ok_text, ok, style="flat"
            ),
        ]

    if kind == "contact-menu":
        views = [Node(W_CLS + "ListView", (w - 360, 140, w - 16, 380), style="dialog")]
        for i, item in enumerate(("Share", "Delete")):
            act = (lambda: _open_dialog(page, "delete-contact")) if item == "Delete" else close
            views.append(
                Node(
                    W_CLS + "TextView",
                    (w - 360, 140 + i * 120, w - 16, 260 + i * 120),
                    text=item,
                    clickable=True,
                    on_tap=act,
                    style="menu",
                )
            )
    elif kind == "delete-contact":
        views.append(text_view((80, 420, w - 80, 520), "Delete this contact?", style="big"))

        def delete() -> None:
            _delete(ph, "raw_contacts", [page.params["id"]])
            page.dialog = None
            sim._back()

        views += buttons("Delete", delete)
    elif kind == "files-menu":
        views = [Node(W_CLS + "ListView", (w - 360, 140, w - 16, 380), style="dialog")]
        for i, item in enumerate(("New folder", "Sort by")):
            act = (lambda: _open_dialog(page, "new-folder")) if item == "New folder" else close
            views.append(
                Node(
                    W_CLS + "TextView",
                    (w - 360, 140 + i * 120, w - 16, 260 + i * 120),
                    text=item,
                    clickable=True,
                    on_tap=act,
                    style="menu",
                )
            )
    elif kind == "new-folder":
        views.append(text_view((80, 420, w - 80, 500), "New folder", style="big"))
        views.append(_field(sim, page, "folder", "Folder name", 540, 80, w - 80))

        def make() -> None:
            name = page.fields.pop("folder", "").strip()
            if name and "/" not in name:
                sim.phone.dirs.add(f"{page.params['dir']}/{name}")
            page.dialog, page.focus = None, None

        views += buttons("OK", make)
    elif kind == "delete-files":
        n = len(page.selection)
        views.append(
            text_view(
                (80, 420, w - 80, 520), f"Delete {n} item{'s' if n != 1 else ''}?", style="big"
            )
        )

        def delete_files() -> None:
            for path in page.selection:
                sim._remove(path, recursive=True)
            page.selection.clear()
            page.dialog = None

        views += buttons("OK", delete_files)
    elif kind == "time-picker":
        if d.get("mode") == "clock":
            views.append(text_view((80, 420, w - 80, 500), "Select time", style="big"))
            views.append(
                Node(
                    "android.view.View",
                    (200, 520, w - 200, 760),
                    desc="Clock face",
                    style="clockface",
                )
            )
            views.append(
                button(
                    (64, box[3] - 110, 184, box[3] - 20),
                    "",
                    lambda: d.__setitem__("mode", "text"),
                    desc="Switch to text input mode for the time input.",
                    image=True,
                    style="flat",
                )
            )
        else:
            views.append(text_view((80, 420, w - 80, 500), "Enter time", style="big"))
            views.append(_field(sim, page, "hour", "hour", 520, 80, 300))
            views.append(_field(sim, page, "minute", "minute", 520, 340, 560))
            pm = d.get("pm", False)
            for j, label in enumerate(("AM", "PM")):
                views.append(
                    Node(
                        W_CLS + "RadioButton",
                        (580, 520 + j * 60, w - 64, 580 + j * 60),
                        text=label,
                        checkable=True,
                        checked=(label == "PM") == pm,
                        clickable=True,
                        on_tap=lambda v=label == "PM": d.__setitem__("pm", v),
                    )
                )
            if d.get("error"):
                views.append(text_view((80, 650, w - 80, 700), d["error"], style="error"))
        views += buttons("OK", lambda: _set_alarm(sim, page))
    return views


def _set_alarm(sim: AdbDeviceSimulator, page: Page) -> None:
    d = page.dialog or {}
    if d.get("mode") == "clock":
        d["error"] = "Pick a time"
        return
    try:
        hour, minute = int(page.fields.get("hour", "")), int(page.fields.get("minute", ""))
    except ValueError:
        d["error"] = "Enter a valid time"
        return
    if not (1 <= hour <= 12 and 0 <= minute <= 59):
        d["error"] = "Enter a valid time"
        return
    hour24 = hour % 12 + (12 if d.get("pm") else 0)
    _insert(sim.phone, "alarms", {"hour": hour24, "minutes": minute, "enabled": 1})
    page.fields.pop("hour", None)
    page.fields.pop("minute", None)
    page.dialog, page.focus = None, None


_APPS_UI: dict[str, Callable[[AdbDeviceSimulator, Page], list[Node]]] = {
    "launcher": _ui_launcher,
    "settings": _ui_settings,
    "contacts": _ui_contacts,
    "editor": _ui_contacts,
    "contact": _ui_contacts,
    "alarms": _ui_clock,
    "files": _ui_files,
    "browser": _ui_browser,
}


# ---------------------------------------------------------------- drawing


def _render_key(n: Node) -> tuple:
    return (
        n.cls,
        n.bounds,
        n.text,
        n.desc,
        n.hint,
        n.checked,
        n.focused,
        n.selected,
        n.style,
        tuple(_render_key(c) for c in n.children),
    )


_FONTS: dict[int, Any] = {}


def _font(size: int) -> Any:
    from PIL import ImageFont

    if size not in _FONTS:
        _FONTS[size] = ImageFont.load_default(size=size)
    return _FONTS[size]


def _draw(views: list[Node], width: int, height: int) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), (250, 250, 250) if views else (0, 0, 0))
    d = ImageDraw.Draw(img)
    if views:
        d.rectangle((0, 0, width, STATUS_H), fill=(230, 230, 235))
    for v in views:
        for n in v.walk():
            _draw_node(d, n)
    out = io.BytesIO()
    img.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _draw_node(d: Any, n: Node) -> None:
    x0, y0, x1, y1 = n.bounds
    cls = n.cls.rsplit(".", 1)[-1]
    mid = (y0 + y1) // 2
    if n.style == "scrim":
        d.rectangle(n.bounds, fill=(120, 120, 125))
    elif n.style == "dialog":
        d.rounded_rectangle(n.bounds, 24, fill=(255, 255, 255), outline=(200, 200, 205))
    elif n.style == "title":
        d.rectangle(n.bounds, fill=(240, 240, 245))
        d.text((32, mid), n.text, fill=(20, 20, 30), font=_font(40), anchor="lm")
    elif n.style == "row":
        if n.selected:
            d.rectangle(n.bounds, fill=(210, 228, 255))
        d.line((x0 + 24, y1 - 1, x1 - 24, y1 - 1), fill=(225, 225, 230))
    elif n.style == "fab":
        d.rounded_rectangle(n.bounds, 36, fill=(26, 115, 232))
        cx, cy = (x0 + x1) // 2, mid
        d.line((cx - 24, cy, cx + 24, cy), fill=(255, 255, 255), width=6)
        d.line((cx, cy - 24, cx, cy + 24), fill=(255, 255, 255), width=6)
    elif n.style == "icon":
        d.rounded_rectangle((x0 + 30, y0, x1 - 30, y0 + 120), 30, fill=_color(n.text))
        d.text(((x0 + x1) // 2, y0 + 160), n.text, fill=(20, 20, 30), font=_font(24), anchor="mm")
    elif n.style == "clockface":
        d.ellipse(n.bounds, outline=(26, 115, 232), width=4)
    elif cls == "Switch":
        d.text((x0 + 32, mid), n.text or n.desc, fill=(20, 20, 30), font=_font(30), anchor="lm")
        color = (26, 115, 232) if n.checked else (170, 170, 175)
        d.rounded_rectangle((x1 - 130, mid - 22, x1 - 40, mid + 22), 22, fill=color)
        knob = x1 - 62 if n.checked else x1 - 108
        d.ellipse((knob - 20, mid - 20, knob + 20, mid + 20), fill=(255, 255, 255))
    elif cls == "EditText":
        color = (26, 115, 232) if n.focused else (150, 150, 155)
        d.line((x0, y1 - 4, x1, y1 - 4), fill=color, width=4 if n.focused else 2)
        text, fill = (n.text, (20, 20, 30)) if n.text else (n.hint, (150, 150, 155))
        d.text((x0 + 12, mid), text, fill=fill, font=_font(30), anchor="lm")
    elif cls == "RadioButton":
        d.ellipse((x0, mid - 18, x0 + 36, mid + 18), outline=(26, 115, 232), width=3)
        if n.checked:
            d.ellipse((x0 + 9, mid - 9, x0 + 27, mid + 9), fill=(26, 115, 232))
        d.text((x0 + 50, mid), n.text, fill=(20, 20, 30), font=_font(28), anchor="lm")
    elif cls in ("Button", "ImageButton"):
        if n.style == "button":
            d.rounded_rectangle(n.bounds, 20, fill=(26, 115, 232))
            d.text(((x0 + x1) // 2, mid), n.text, fill=(255, 255, 255), font=_font(28), anchor="mm")
        else:
            label = n.text or n.desc.split(" ")[0][:10]
            d.text(((x0 + x1) // 2, mid), label, fill=(26, 115, 232), font=_font(24), anchor="mm")
    elif cls == "TextView" and (n.text or n.desc):
        size = {"big": 44, "summary": 24, "status": 24, "tab": 26, "error": 26}.get(n.style, 30)
        fill = {"summary": (110, 110, 115), "error": (200, 30, 30)}.get(n.style, (20, 20, 30))
        if n.selected:
            d.rectangle((x0, y0, x1, y0 + 6), fill=(26, 115, 232))
        d.text((x0, mid), n.text or n.desc, fill=fill, font=_font(size), anchor="lm")


def _color(text: str) -> tuple[int, int, int]:
    h = hashlib.md5(text.encode()).digest()
    return 60 + h[0] % 150, 60 + h[1] % 150, 60 + h[2] % 150


# ---------------------------------------------------------------- the console


class _ConsoleServer:
    """The emulator console of the double (loopback, one thread per connection)."""

    def __init__(self, sim: AdbDeviceSimulator) -> None:
        self.sim = sim
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]

    def start(self) -> None:
        threading.Thread(target=self._accept, name="adb-sim-console", daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        authed = False
        with contextlib.suppress(OSError), conn:
            conn.sendall(
                b"Android Console: Authentication required\r\n"
                b"Android Console: type 'auth <auth_token>' to authenticate\r\n"
                b"Android Console: you can find your <auth_token> in \r\n"
                b"'/root/.emulator_console_auth_token'\r\nOK\r\n"
            )
            buf = b""
            while True:
                data = conn.recv(4096)
                if not data:
                    return
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    words = line.decode(errors="replace").strip().split()
                    if not words:
                        continue
                    self.sim.console_log.append(" ".join(words))
                    if words[0] in ("quit", "exit"):
                        return
                    if words[0] == "auth":
                        authed = len(words) == 2 and words[1] == self.sim.console_token
                        reply = (
                            "Android Console: type 'help' for a list of commands\r\nOK\r\n"
                            if authed
                            else "KO: authentication token does not match "
                            "~/.emulator_console_auth_token\r\n"
                        )
                    elif not authed:
                        reply = "KO: unknown command, try 'help'\r\n"
                    else:
                        reply = self._command(words)
                    conn.sendall(reply.encode())

    def _command(self, words: list[str]) -> str:
        sim = self.sim
        if words == ["ping"]:
            return "I am alive!\r\nOK\r\n"
        if words[:2] == ["avd", "snapshot"] and len(words) >= 3:
            verb, name = words[2], words[3] if len(words) > 3 else ""
            if verb == "list":
                lines = "".join(
                    f"--        {n}     1.2G 2026-11-30 10:00:00 00:00:10.000\r\n"
                    for n in sim.snapshots
                )
                return (
                    "List of snapshots present on all disks:\r\n"
                    "ID        TAG                 VM SIZE                DATE       VM CLOCK\r\n"
                    f"{lines}OK\r\n"
                )
            if verb == "save" and name:
                sim.save_snapshot(name)
                return "OK\r\n"
            if verb == "load" and name:
                if name not in sim.snapshots:
                    return f"KO: snapshot '{name}' does not exist\r\n"
                sim.load_snapshot(name)
                return "OK\r\n"
        if words[:2] == ["screenrecord", "screenshot"] and len(words) == 3:
            from pathlib import Path

            target = Path(words[2])
            if not target.is_dir():
                return f"KO: {words[2]} is not a directory\r\n"
            with sim.lock:
                png = sim.screenshot_png()
            (target / f"Screenshot_{time.strftime('%Y%m%d-%H%M%S')}.png").write_bytes(png)
            return "OK\r\n"
        return "KO: unknown command, try 'help'\r\n"
