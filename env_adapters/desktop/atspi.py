"""The widgets inside GTK windows, read over AT-SPI (the accessibility bus of one desktop).

Every desktop runs its own accessibility bus: ``at-spi-bus-launcher`` (Debian's
``at-spi2-core``) started on the desktop's private session bus
(:meth:`~env_adapters.desktop.display.Desktop.start_a11y_bus`). GTK 3 apps load
the AT-SPI bridge (atk-bridge) on their own; they find the bus through the
session bus (``org.a11y.Bus.GetAddress``). Nothing else is needed in their
environment: ``NO_AT_BRIDGE`` must not be ``1`` (the desktop sets ``0``),
``GTK_MODULES`` and ``ACCESSIBILITY_ENABLED`` play no part for GTK 3.

:class:`AtspiClient` is a small D-Bus client (jeepney for the wire format and
authentication; its own receive loop, so that calls are pipelined and the big
reply is decoded by a specialised parser) on that bus. Per observation it does
at most three pipelined rounds, all applications at once:

1. ``ListNames`` + ``GetConnectionUnixProcessID`` of new names, only when a
   window's pid has no known bus name (apps without AT-SPI, e.g. xterm, are
   remembered for a second);
2. ``org.a11y.atspi.Cache.GetItems`` per application: one reply lists every
   object the app's bridge has cached, with parent, index, child count,
   interfaces, name, role, description and state set;
3. ``Component.GetExtents`` (screen coordinates) of the objects that will be
   listed (showing and visible, and interactive or named) and of the
   top-level frames; ``Text.GetText`` (the first :data:`VALUE_LIMIT`
   characters) of text fields; ``Value.CurrentValue`` of sliders and spin
   buttons.

The bridge creates its cache only once an assistive client listens for
events, so the client registers one event listener with the registry
(``RegisterEvent("window:activate")``) when it connects; apps started later
see it at start-up.

Failure is never an exception out of :meth:`AtspiClient.snapshot`: an app
that does not answer within ``timeout_s`` (hung, stopped) gets no widget
lines; a bus that goes away marks the client dead. Both are reported in the
snapshot's ``error`` (the env puts it into the observation's metadata and
serves the window list alone).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import select
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from env_adapters.gui.spaces import visible_center
from farm.errors import MissingExtraError

try:
    from jeepney import DBusAddress, new_method_call
    from jeepney.bus import get_bus
    from jeepney.io.blocking import prep_socket
    from jeepney.low_level import Endianness, calc_msg_size, parse_signature
except ImportError as e:  # pragma: no cover - depends on the install
    raise MissingExtraError("jeepney", "desktop") from e

#: characters of a text field's value shown (longer ones end with "...")
VALUE_LIMIT = 200
NAME_LIMIT = 200

ROOT_PATH = "/org/a11y/atspi/accessible/root"
DBUS = "org.freedesktop.DBus"
PROPERTIES = "org.freedesktop.DBus.Properties"
CACHE_SIGNATURE = "a((so)(so)(so)iiassusau)"
_ATSPI = "org.a11y.atspi."

#: AtspiRole (atspi-constants.h), index = role number
ROLE_NAMES: tuple[str, ...] = (
    "invalid", "accelerator label", "alert", "animation", "arrow", "calendar", "canvas",
    "check box", "check menu item", "color chooser", "column header", "combo box",
    "date editor", "desktop icon", "desktop frame", "dial", "dialog", "directory pane",
    "drawing area", "file chooser", "filler", "focus traversable", "font chooser", "frame",
    "glass pane", "html container", "icon", "image", "internal frame", "label",
    "layered pane", "list", "list item", "menu", "menu bar", "menu item", "option pane",
    "page tab", "page tab list", "panel", "password text", "popup menu", "progress bar",
    "push button", "radio button", "radio menu item", "root pane", "row header",
    "scroll bar", "scroll pane", "separator", "slider", "spin button", "split pane",
    "status bar", "table", "table cell", "table column header", "table row header",
    "tearoff menu item", "terminal", "text", "toggle button", "tool bar", "tool tip", "tree",
    "tree table", "unknown", "viewport", "window", "extended", "header", "footer",
    "paragraph", "ruler", "application", "autocomplete", "editbar", "embedded", "entry",
    "chart", "caption", "document frame", "heading", "page", "section", "redundant object",
    "form", "link", "input method window", "table row", "tree item", "document spreadsheet",
    "document presentation", "document text", "document web", "document email", "comment",
    "list box", "grouping", "image map", "notification", "info bar", "level bar",
    "title bar", "block quote", "audio", "video", "definition", "article", "landmark", "log",
    "marquee", "math", "rating", "timer", "static", "math fraction", "math root",
    "subscript", "superscript", "description list", "description term",
    "description value", "footnote", "content deletion", "content insertion", "mark",
    "suggestion", "push button menu",
)  # fmt: skip

# AtspiStateType bits (atspi-constants.h)
CHECKED, EDITABLE, ENABLED, FOCUSABLE, FOCUSED = 4, 7, 8, 11, 12
PRESSED, SELECTED, SENSITIVE, SHOWING, VISIBLE = 20, 23, 24, 25, 30

#: top-level roles: the window lines stand for them
TOPLEVEL_ROLES = frozenset({"frame", "window", "dialog", "alert", "file chooser"})
#: roles listed even without a name or an action
INPUT_ROLES = frozenset(
    {
        "text", "entry", "password text", "terminal", "spin button", "slider", "combo box",
        "check box", "radio button", "push button", "toggle button", "list", "list box",
        "tree", "tree table", "table", "document text", "document frame", "scroll bar",
    }
)  # fmt: skip
#: roles whose name is their text (no value read)
CHECKABLE_ROLES = frozenset({"check box", "radio button", "check menu item", "radio menu item"})
#: roles with options for select_element
SELECT_ROLES = frozenset({"combo box", "list", "list box", "page tab list", "tree"})
#: roles whose Text is read as the value
TEXT_VALUE_ROLES = frozenset(
    {"text", "entry", "password text", "terminal", "paragraph", "document text", "spin button"}
)


#: a method call: (bus name, object path, interface, method, signature, body)
Call = tuple[str, str, str, str, "str | None", tuple]


class A11yError(Exception):
    """The accessibility bus cannot be used (gone, or never came up)."""


@dataclass(frozen=True)
class DBusErrorReply:
    name: str
    message: str

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


# ---------------------------------------------------------------- the wire


def _parse_cache_items(buf: bytes, pos: int, little: bool) -> list[tuple]:
    """Decode a ``GetItems`` body (signature :data:`CACHE_SIGNATURE`) fast.

    Each item becomes ``(path, parent_bus, parent_path, index, child_count,
    interfaces, name, role, description, states)``; ``interfaces`` is a tuple of
    short names (``"Component"``, ``"Text"``...), ``states`` one 64-bit int.
    """
    u32 = struct.Struct("<I" if little else ">I").unpack_from
    i32 = struct.Struct("<i" if little else ">i").unpack_from
    iface_names: dict[bytes, str] = {}

    def string(p: int) -> tuple[bytes, int]:
        p += -p & 3
        (n,) = u32(buf, p)
        p += 4
        return buf[p : p + n], p + n + 1

    pos += -pos & 3
    (length,) = u32(buf, pos)
    pos += 4
    pos += -pos & 7
    end = pos + length
    items = []
    while pos < end:
        pos += -pos & 7  # struct
        pos += -pos & 7  # (so) object
        _, pos = string(pos)
        path, pos = string(pos)
        pos += -pos & 7  # (so) application
        _, pos = string(pos)
        _, pos = string(pos)
        pos += -pos & 7  # (so) parent
        parent_bus, pos = string(pos)
        parent_path, pos = string(pos)
        pos += -pos & 3
        (index,) = i32(buf, pos)
        (children,) = i32(buf, pos + 4)
        pos += 8
        (alen,) = u32(buf, pos)
        pos += 4
        aend = pos + alen
        ifaces = []
        while pos < aend:
            raw, pos = string(pos)
            name = iface_names.get(raw)
            if name is None:
                text = raw.decode()
                name = iface_names[raw] = text[len(_ATSPI) :] if text.startswith(_ATSPI) else text
            ifaces.append(name)
        pos = aend
        name_raw, pos = string(pos)
        pos += -pos & 3
        (role,) = u32(buf, pos)
        pos += 4
        desc, pos = string(pos)
        pos += -pos & 3
        (slen,) = u32(buf, pos)
        pos += 4
        states = 0
        for k in range(slen // 4):
            states |= u32(buf, pos + 4 * k)[0] << (32 * k)
        pos += slen
        items.append(
            (
                path.decode(),
                parent_bus.decode(),
                parent_path.decode(),
                index,
                children,
                tuple(ifaces),
                name_raw.decode(errors="replace"),
                role,
                desc.decode(errors="replace"),
                states,
            )
        )
    return items


class _Conn:
    """One D-Bus connection with pipelined calls (see module doc)."""

    def __init__(self, address: str, timeout_s: float) -> None:
        try:
            self.sock = prep_socket(get_bus(address), timeout=timeout_s)
        except (OSError, RuntimeError, TimeoutError) as e:
            raise A11yError(f"cannot connect to {address}: {e}") from e
        self.buf = bytearray()
        self.serials = itertools.count(1)
        self._types: dict[str, Any] = {}
        self._encoded: dict[Call, bytes] = {}
        reply = self.call_one(self._bus_call("Hello"), timeout_s=timeout_s, what="Hello to the bus")
        self.unique_name: str = reply[0]

    @staticmethod
    def _bus_call(method: str, signature: str | None = None, body: tuple = ()) -> Call:
        return _call(DBUS, "/org/freedesktop/DBus", DBUS, method, signature, body)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _read(self, deadline: float) -> bytes | None:
        """The next whole message, or None at the deadline."""
        while True:
            if len(self.buf) >= 16:
                size = calc_msg_size(bytes(self.buf[:16]))
                if len(self.buf) >= size:
                    raw = bytes(self.buf[:size])
                    del self.buf[:size]
                    return raw
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return None
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionResetError("the bus closed the connection")
            self.buf += data

    def _body(self, raw: bytes, sig: str, pos: int, little: bool) -> tuple:
        if not sig:
            return ()
        if sig == "(iiii)":  # GetExtents
            return (struct.unpack_from("<4i" if little else ">4i", raw, pos),)
        if sig == CACHE_SIGNATURE:
            return (_parse_cache_items(raw, pos, little),)
        body_type = self._types.get(sig)
        if body_type is None:
            body_type = self._types[sig] = parse_signature(list(f"({sig})"))
        return body_type.parse_data(raw, pos, Endianness.little if little else Endianness.big)[0]

    def _encode(self, call: Call, serial: int) -> bytes:
        """The bytes of a method call; cached per call, only the serial is patched in."""
        data = self._encoded.get(call)
        if data is None:
            bus, path, iface, method, sig, body = call
            body = tuple(list(v) if isinstance(v, tuple) else v for v in body)  # arrays
            msg = new_method_call(
                DBusAddress(path, bus_name=bus, interface=iface), method, sig, body
            )
            data = msg.serialise(serial=1)  # little-endian: jeepney's default
            if len(self._encoded) > 20_000:
                self._encoded.clear()
            self._encoded[call] = data
        out = bytearray(data)
        struct.pack_into("<I", out, 8, serial)
        return out

    def call_many(self, calls: Sequence[Call], timeout_s: float) -> list[Any]:
        """Send all, then collect the replies: a body tuple, a :class:`DBusErrorReply`,
        or None for a call not answered within ``timeout_s``. Bus loss raises A11yError."""
        deadline = time.monotonic() + timeout_s
        slots: dict[int, int] = {}
        results: list[Any] = [None] * len(calls)
        try:
            self.sock.settimeout(max(timeout_s, 1.0))  # a stopped bus must not block a send
            out = bytearray()
            for i, call in enumerate(calls):
                serial = next(self.serials)
                out += self._encode(call, serial)
                slots[serial] = i
            self.sock.sendall(out)
            while slots:
                raw = self._read(deadline)
                if raw is None:
                    break
                kind, reply_to, sig, error, pos, little = _header(raw)
                i = slots.pop(reply_to, None)
                if i is None:
                    continue  # a signal, or the late reply of an earlier call
                body = self._body(raw, sig, pos, little)
                if kind == 3:  # error
                    results[i] = DBusErrorReply(error, str(body[0]) if body else "")
                else:
                    results[i] = body
        except (OSError, ValueError, struct.error) as e:
            raise A11yError(f"the accessibility bus went away: {e}") from e
        return results

    def call_one(self, message: Call, *, timeout_s: float, what: str) -> tuple:
        (reply,) = self.call_many([message], timeout_s)
        if reply is None:
            raise A11yError(f"{what}: no answer within {timeout_s:g} s")
        if isinstance(reply, DBusErrorReply):
            raise A11yError(f"{what}: {reply}")
        return reply


def _call(bus: str, path: str, iface: str, method: str, sig: str | None = None, body=()) -> Call:
    return (bus, path, iface, method, sig, tuple(body))


def _header(raw: bytes) -> tuple[int, int, str, str, int, bool]:
    """``(message type, reply serial, body signature, error name, body offset,
    little-endian)`` of a message (the header fields a reply needs)."""
    little = raw[0] == 0x6C  # "l"
    u32 = struct.Struct("<I" if little else ">I").unpack_from
    (end,) = u32(raw, 12)
    end += 16
    pos, reply_to, sig, error = 16, -1, "", "error"
    while pos < end:
        pos += -pos & 7
        code, n = raw[pos], raw[pos + 1]
        kind = raw[pos + 2 : pos + 2 + n]
        pos += 3 + n
        if kind in (b"s", b"o"):
            pos += -pos & 3
            (size,) = u32(raw, pos)
            value = raw[pos + 4 : pos + 4 + size].decode(errors="replace")
            pos += 5 + size
            if code == 4:
                error = value
        elif kind == b"g":
            size = raw[pos]
            value = raw[pos + 1 : pos + 1 + size].decode()
            pos += 2 + size
            if code == 8:
                sig = value
        elif kind == b"u":
            pos += -pos & 3
            (number,) = u32(raw, pos)
            pos += 4
            if code == 5:
                reply_to = number
        else:
            raise ValueError(f"unexpected header field type {kind!r}")
    return raw[1], reply_to, sig, error, end + (-end & 7), little


# ---------------------------------------------------------------- the view


@dataclass(frozen=True)
class Widget:
    """A widget inside a top-level window (one line of the text view)."""

    ref: int
    xid: int  # the X window it belongs to
    bus: str
    path: str
    role: str  # AT-SPI role name, e.g. "push button"
    name: str
    value: str | None
    box: tuple[int, int, int, int]
    states: int
    interfaces: tuple[str, ...]

    def has(self, state: int) -> bool:
        return bool(self.states >> state & 1)

    @property
    def role_token(self) -> str:
        return self.role.replace(" ", "_")

    def line(self) -> str:
        parts = [f"[{self.ref}] {self.role_token} {json.dumps(self.name[:NAME_LIMIT])}"]
        if self.value is not None:
            value = self.value
            if len(value) > VALUE_LIMIT:
                value = value[:VALUE_LIMIT] + "..."
            parts.append(f"value={json.dumps(value)}")
        if self.role == "toggle button" and (self.has(CHECKED) or self.has(PRESSED)):
            parts.append("pressed")
        if self.has(FOCUSED):
            parts.append("focused")
        if not self.has(SENSITIVE):
            parts.append("disabled")
        x, y, w, h = self.box
        parts.append(f"@({x},{y},{w},{h})")
        return " ".join(parts)

    def visible_center(self, width: int, height: int) -> tuple[int, int] | None:
        return visible_center(self.box, width, height)


@dataclass
class Snapshot:
    """Widgets per X window (``xid -> widgets``, refs still 0) and what went wrong."""

    widgets: dict[int, list[Widget]] = field(default_factory=dict)
    error: str | None = None


@dataclass
class _Item:
    path: str
    parent: str
    index: int
    interfaces: tuple[str, ...]
    name: str
    role: str
    states: int


def _listed(item: _Item) -> bool:
    """Showing and visible, and interactive or named (see module doc)."""
    s = item.states
    if not (s >> SHOWING & 1 and s >> VISIBLE & 1) or item.role in TOPLEVEL_ROLES:
        return False
    if item.role in ("application", "filler", "panel", "separator", "scroll pane", "viewport"):
        return bool(item.name.strip()) and item.role != "application"
    return (
        "Action" in item.interfaces
        or "EditableText" in item.interfaces
        or item.role in INPUT_ROLES
        or bool(item.name.strip())
    )


class AtspiClient:
    """The AT-SPI view of one desktop (see module doc).

    Args:
        session_bus: the desktop's session bus address (``org.a11y.Bus`` lives there).
        timeout_s: how long one observation waits for an app's answers.
        connect_timeout_s: how long :meth:`connect` waits for the bus to come up.
    """

    def __init__(
        self, session_bus: str, *, timeout_s: float = 0.5, connect_timeout_s: float = 10.0
    ) -> None:
        self.session_bus = session_bus
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.conn: _Conn | None = None
        self.dead: str | None = "not connected"
        self._pid_names: dict[int, str] = {}
        self._no_name: dict[int, float] = {}  # pid -> when it had no bus name

    # ------------------------------------------------------------ connection

    def connect(self) -> None:
        """Wait for ``org.a11y.Bus`` on the session bus, connect to the a11y bus and
        register an event listener (it makes the apps' bridges build their cache)."""
        self.close()
        deadline = time.monotonic() + self.connect_timeout_s
        session = _Conn(self.session_bus, self.connect_timeout_s)
        try:
            while True:
                owned = session.call_one(
                    session._bus_call("NameHasOwner", "s", ("org.a11y.Bus",)),
                    timeout_s=2.0,
                    what="NameHasOwner",
                )[0]
                if owned:
                    break
                if time.monotonic() > deadline:
                    raise A11yError(
                        f"the accessibility bus (org.a11y.Bus) did not come up within "
                        f"{self.connect_timeout_s:g} s"
                    )
                time.sleep(0.01)
            address = session.call_one(
                _call("org.a11y.Bus", "/org/a11y/bus", "org.a11y.Bus", "GetAddress"),
                timeout_s=5.0,
                what="org.a11y.Bus.GetAddress",
            )[0]
        finally:
            session.close()
        conn = _Conn(address, 5.0)
        try:
            conn.call_one(
                _call(
                    "org.a11y.atspi.Registry",
                    "/org/a11y/atspi/registry",
                    "org.a11y.atspi.Registry",
                    "RegisterEvent",
                    "sas",
                    ("window:activate", ()),
                ),
                timeout_s=10.0,  # the bus starts the registry daemon on this first call
                what="registering with the AT-SPI registry",
            )
        except BaseException:
            conn.close()
            raise
        self.conn, self.dead = conn, None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        self.dead = "closed"
        self.forget()

    def forget(self) -> None:
        """Drop what is known of apps (a reset killed them)."""
        self._pid_names.clear()
        self._no_name.clear()

    def _fail(self, error: A11yError) -> str:
        self.dead = str(error)
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        return self.dead

    # ------------------------------------------------------------ apps

    def _resolve(self, pids: Iterable[int]) -> None:
        now = time.monotonic()
        wanted = [
            p for p in pids if p not in self._pid_names and now - self._no_name.get(p, -9.0) > 1.0
        ]
        if not wanted:
            return
        assert self.conn is not None
        (names,) = self.conn.call_one(
            _Conn._bus_call("ListNames"), timeout_s=self.timeout_s, what="ListNames"
        )
        known = set(self._pid_names.values())
        mine = self.conn.unique_name
        new = [n for n in names if n.startswith(":") and n not in known and n != mine]
        replies = self.conn.call_many(
            [_Conn._bus_call("GetConnectionUnixProcessID", "s", (n,)) for n in new],
            self.timeout_s,
        )
        for name, reply in zip(new, replies, strict=True):
            if isinstance(reply, tuple):
                self._pid_names.setdefault(int(reply[0]), name)
        for p in wanted:
            if p not in self._pid_names:
                self._no_name[p] = now

    # ------------------------------------------------------------ the snapshot

    def snapshot(self, windows: Sequence[Any]) -> Snapshot:
        """The widgets of ``windows`` (the window list: ``xid``, ``pid``, ``title``,
        ``box``, ``minimized``); never raises (see module doc)."""
        if self.conn is None:
            return Snapshot(error=f"AT-SPI unavailable: {self.dead}")
        try:
            return self._snapshot(windows)
        except A11yError as e:
            return Snapshot(error=f"AT-SPI unavailable: {self._fail(e)}")
        except Exception as e:  # noqa: BLE001 - a reply we cannot read: windows only, say why
            return Snapshot(error=f"AT-SPI view failed: {type(e).__name__}: {e}")

    def _snapshot(self, windows: Sequence[Any]) -> Snapshot:
        conn = self.conn
        assert conn is not None
        shown = [w for w in windows if w.pid is not None and not w.minimized]
        self._resolve({w.pid for w in shown})
        apps = sorted({self._pid_names[w.pid] for w in shown if w.pid in self._pid_names})
        out = Snapshot()
        if not apps:
            return out
        errors = []

        def label(bus: str) -> str:
            pid = next((p for p, n in self._pid_names.items() if n == bus), None)
            win = next((w for w in shown if w.pid == pid), None)
            return f"app {win.wm_class if win is not None else '?'} (pid {pid})"

        replies = conn.call_many(
            [_call(b, "/org/a11y/atspi/cache", _ATSPI + "Cache", "GetItems") for b in apps],
            self.timeout_s,
        )
        per_app: dict[str, dict[str, _Item]] = {}
        for bus, reply in zip(apps, replies, strict=True):
            if not isinstance(reply, tuple):
                why = f"no answer within {self.timeout_s:g} s" if reply is None else str(reply)
                errors.append(f"{label(bus)} did not list its widgets: {why}")
                if isinstance(reply, DBusErrorReply):
                    self._pid_names = {p: n for p, n in self._pid_names.items() if n != bus}
                continue
            items = {}
            for path, _pbus, ppath, index, _n, ifaces, name, role, _d, states in reply[0]:
                role_name = ROLE_NAMES[role] if role < len(ROLE_NAMES) else "unknown"
                items[path] = _Item(path, ppath, index, ifaces, name, role_name, states)
            per_app[bus] = items

        # what to ask: extents of listed items and top-levels, values of text fields
        calls, wanted = [], []
        for bus, items in per_app.items():
            for item in items.values():
                toplevel = item.parent == ROOT_PATH and item.role in TOPLEVEL_ROLES
                listed = _listed(item)
                if not (listed or toplevel) or "Component" not in item.interfaces:
                    continue
                wanted.append((bus, item, toplevel, "extents"))
                calls.append(_call(bus, item.path, _ATSPI + "Component", "GetExtents", "u", (0,)))
                if listed and "Text" in item.interfaces and item.role in TEXT_VALUE_ROLES:
                    wanted.append((bus, item, toplevel, "text"))
                    calls.append(
                        _call(
                            bus, item.path, _ATSPI + "Text", "GetText", "ii", (0, VALUE_LIMIT + 1)
                        )
                    )
                elif listed and "Value" in item.interfaces:
                    wanted.append((bus, item, toplevel, "value"))
                    calls.append(
                        _call(
                            bus,
                            item.path,
                            PROPERTIES,
                            "Get",
                            "ss",
                            (_ATSPI + "Value", "CurrentValue"),
                        )
                    )
        replies = conn.call_many(calls, self.timeout_s)
        boxes: dict[tuple[str, str], tuple[int, int, int, int]] = {}
        values: dict[tuple[str, str], str] = {}
        late: set[str] = set()
        for (bus, item, _top, kind), reply in zip(wanted, replies, strict=True):
            if reply is None:
                late.add(bus)
                continue
            if not isinstance(reply, tuple):
                continue
            key = (bus, item.path)
            if kind == "extents":
                boxes[key] = tuple(int(v) for v in reply[0])  # type: ignore[assignment]
            elif kind == "text":
                values[key] = str(reply[0])
            else:
                values[key] = _number(reply[0])
        for bus in sorted(late):
            errors.append(f"{label(bus)} did not answer within {self.timeout_s:g} s")

        for bus, items in per_app.items():
            self._assign(bus, items, boxes, values, windows, out)
        if errors:
            out.error = "; ".join(errors)
        return out

    def _assign(
        self,
        bus: str,
        items: dict[str, _Item],
        boxes: dict[tuple[str, str], tuple[int, int, int, int]],
        values: dict[tuple[str, str], str],
        windows: Sequence[Any],
        out: Snapshot,
    ) -> None:
        pid = next((p for p, n in self._pid_names.items() if n == bus), None)
        mine = [w for w in windows if w.pid == pid and not w.minimized]
        # top-level objects -> X windows: same title, else the frame holds the client area
        owner: dict[str, int] = {}
        for item in items.values():
            if item.parent != ROOT_PATH or item.role not in TOPLEVEL_ROLES:
                continue
            if not (item.states >> SHOWING & 1):
                continue
            box = boxes.get((bus, item.path))
            match = next((w for w in mine if w.title == item.name), None)
            if match is None and box is not None:
                match = next((w for w in mine if _contains(box, w.box)), None)
            if match is None and len(mine) == 1:
                match = mine[0]
            if match is not None:
                owner[item.path] = match.xid

        def toplevel_of(path: str) -> str | None:
            seen = 0
            while path in items and seen < 200:
                item = items[path]
                if item.parent == ROOT_PATH:
                    return path
                path, seen = item.parent, seen + 1
            return None

        for item in items.values():
            key = (bus, item.path)
            if key not in boxes or not _listed(item):
                continue
            x, y, w, h = boxes[key]
            if w <= 0 or h <= 0:
                continue
            top = toplevel_of(item.path)
            xid = owner.get(top) if top is not None else None
            if xid is None:
                continue
            value = values.get(key)
            if value is None and item.role in CHECKABLE_ROLES:
                value = "checked" if item.states >> CHECKED & 1 else "unchecked"
            out.widgets.setdefault(xid, []).append(
                Widget(
                    ref=0,
                    xid=xid,
                    bus=bus,
                    path=item.path,
                    role=item.role,
                    name=item.name,
                    value=value,
                    box=(x, y, w, h),
                    states=item.states,
                    interfaces=item.interfaces,
                )
            )
        for widgets in out.widgets.values():
            widgets.sort(key=lambda w: (w.box[1], w.box[0], w.path))

    # ------------------------------------------------------------ element actions

    def _conn(self) -> _Conn:
        if self.conn is None:
            raise A11yError(f"AT-SPI unavailable: {self.dead}")
        return self.conn

    def call(self, widget: Widget, iface: str, method: str, sig: str | None = None, body=()):
        """One call on a widget's object (A11yError when it cannot be made)."""
        try:
            return self._conn().call_one(
                _call(widget.bus, widget.path, _ATSPI + iface, method, sig, body),
                timeout_s=max(self.timeout_s, 1.0),
                what=f"{iface}.{method}",
            )
        except A11yError as e:
            if "went away" in str(e):
                self._fail(e)
            raise

    def grab_focus(self, widget: Widget) -> bool:
        if "Component" not in widget.interfaces:
            return False
        return bool(self.call(widget, "Component", "GrabFocus")[0])

    def focused(self, widget: Widget) -> bool:
        states = self.call(widget, "Accessible", "GetState")[0]
        return bool(sum(int(v) << (32 * k) for k, v in enumerate(states)) >> FOCUSED & 1)

    def options(self, widget: Widget) -> tuple[Widget, list[tuple[int, str, tuple[str, str]]]]:
        """The object that holds a select's options (it or its single menu/list child)
        and ``(index, name, object)`` of each option."""
        holder = widget
        children = list(self.call(widget, "Accessible", "GetChildren")[0])
        if len(children) == 1 and widget.role == "combo box":
            bus, path = children[0]
            holder = replace(widget, bus=bus, path=path, role="menu", interfaces=("Selection",))
            children = list(self.call(holder, "Accessible", "GetChildren")[0])
        options = list(children)
        names = self._names(children)
        # a nameless option (a list box row) is named by the first named object inside it
        for _ in range(5):
            empty = [i for i, n in enumerate(names) if not n]
            if not empty:
                break
            timeout = max(self.timeout_s, 1.0)
            kids = self._conn().call_many(
                [_call(*children[i], _ATSPI + "Accessible", "GetChildren") for i in empty], timeout
            )
            inner = [r[0] if isinstance(r, tuple) else [] for r in kids]
            inner_names = self._names([ref for refs in inner for ref in refs])
            k = 0
            for i, refs in zip(empty, inner, strict=True):
                found = [n for n in inner_names[k : k + len(refs)] if n]
                k += len(refs)
                names[i] = found[0] if found else ""
                if not found and refs:
                    children[i] = refs[0]  # look one level deeper next round
        return holder, [(i, n, options[i]) for i, n in enumerate(names)]

    def _names(self, refs: Sequence[tuple[str, str]]) -> list[str]:
        replies = self._conn().call_many(
            [
                _call(b, p, PROPERTIES, "Get", "ss", (_ATSPI + "Accessible", "Name"))
                for b, p in refs
            ],
            max(self.timeout_s, 1.0),
        )
        return [str(r[0][1]) if isinstance(r, tuple) else "" for r in replies]

    def extents(self, ref: tuple[str, str]) -> tuple[int, int, int, int] | None:
        """The screen box of an object, None when it has none (not showing)."""
        (reply,) = self._conn().call_many(
            [_call(*ref, _ATSPI + "Component", "GetExtents", "u", (0,))], max(self.timeout_s, 1.0)
        )
        if not isinstance(reply, tuple) or reply[0][2] <= 0 or reply[0][3] <= 0:
            return None
        return tuple(int(v) for v in reply[0])  # type: ignore[return-value]

    def select(self, widget: Widget, index: int) -> bool:
        return bool(self.call(widget, "Selection", "SelectChild", "i", (index,))[0])


def _contains(outer: tuple[int, int, int, int], inner: tuple[int, int, int, int]) -> bool:
    ox, oy, ow, oh = outer
    ix, iy, iw, ih = inner
    return ox <= ix and oy <= iy and ix + iw <= ox + ow and iy + ih <= oy + oh


def _number(variant: Any) -> str:
    value = variant[1] if isinstance(variant, tuple) and len(variant) == 2 else variant
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
