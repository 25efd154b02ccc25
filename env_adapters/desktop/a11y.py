"""The text view of a desktop: its windows (EWMH), each followed by its widgets (AT-SPI).

One line per window the window manager manages (``_NET_CLIENT_LIST_STACKING``,
topmost first), then, indented, one line per widget of that window that the
app shows over AT-SPI (:mod:`env_adapters.desktop.atspi`), in reading order
(top to bottom, left to right); all in the shared format
(:mod:`env_adapters.gui.spaces`)::

    [1] window "galculator" class="galculator" focused @(474,196,331,343)
      [2] menu "File" @(474,196,39,25)
      [3] text "" value="12" @(481,228,317,52)
      [4] toggle_button "7" @(480,379,59,34)
      [5] toggle_button "MR" disabled @(675,339,59,34)
    [6] window "xterm" class="xterm" @(0,0,484,316)

Window lines: ``name`` is the window title (``_NET_WM_NAME``, else
``WM_NAME``), ``class`` the instance part of ``WM_CLASS``, ``focused`` marks
the active window (``_NET_ACTIVE_WINDOW``), ``minimized`` a hidden one; the box
is the client area in screen pixels (clipped boxes may extend past the screen).

Widget lines: the AT-SPI role with ``_`` for spaces (``push_button``,
``toggle_button``, ``text``, ``menu``, ``menu_item``, ``check_box``,
``combo_box``...), the accessible name, ``value=`` for text fields (their
first characters), sliders and spin buttons, and ``"checked"``/``"unchecked"``
for check boxes, radio buttons and check menu items; flags ``pressed``
(toggle buttons), ``focused`` (keyboard focus) and ``disabled``; the box in
screen pixels. Listed: widgets that are showing and visible, and interactive
(an action, editable text, an input role) or named. Apps without AT-SPI
(xterm, any non-GTK X11 app) have the window line only; so do all windows
while the accessibility bus is down (the observation's metadata then says
why: ``a11y_error``).

Refs are numbered per observation in text order, windows and widgets alike;
``click_element(ref)`` clicks the centre of the visible part of a window or
widget, ``type_element`` and ``select_element`` act on widgets (see
:mod:`env_adapters.desktop.env`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from Xlib import X, Xatom
from Xlib import error as xerror
from Xlib.display import Display

from env_adapters.gui import SandboxCrashed
from env_adapters.gui.spaces import visible_center

if TYPE_CHECKING:  # atspi needs jeepney: imported when the env starts AT-SPI
    from env_adapters.desktop.atspi import Snapshot, Widget

NAME_LIMIT = 200


@dataclass(frozen=True)
class Window:
    """A top-level client window."""

    ref: int
    xid: int
    title: str
    wm_class: str
    pid: int | None
    box: tuple[int, int, int, int]  # x, y, w, h on screen
    focused: bool
    minimized: bool

    def line(self) -> str:
        flags = (" focused" if self.focused else "") + (" minimized" if self.minimized else "")
        x, y, w, h = self.box
        return (
            f"[{self.ref}] window {json.dumps(self.title[:NAME_LIMIT])} "
            f"class={json.dumps(self.wm_class)}{flags} @({x},{y},{w},{h})"
        )

    def visible_center(self, width: int, height: int) -> tuple[int, int] | None:
        return visible_center(self.box, width, height)


@dataclass(frozen=True)
class TextView:
    """One text view: its lines and the windows and widgets behind the refs."""

    windows: tuple[Window, ...]
    widgets: tuple[Widget, ...] = ()
    #: why widgets are missing (the accessibility bus is down, an app did not answer)
    a11y_error: str | None = None

    @property
    def text(self) -> str:
        by_window: dict[int, list[Widget]] = {}
        for widget in self.widgets:
            by_window.setdefault(widget.xid, []).append(widget)
        lines = []
        for w in self.windows:
            lines.append(w.line())
            lines.extend("  " + x.line() for x in by_window.get(w.xid, ()))
        return "\n".join(lines)

    @property
    def active(self) -> Window | None:
        return next((w for w in self.windows if w.focused), None)

    def by_ref(self, ref: int) -> Window | Widget | None:
        found: Window | Widget | None = next((w for w in self.windows if w.ref == ref), None)
        return found or next((x for x in self.widgets if x.ref == ref), None)

    def window(self, xid: int) -> Window | None:
        return next((w for w in self.windows if w.xid == xid), None)

    def refs(self) -> str:
        """The refs as ranges ("1-12, 14")."""
        refs = sorted([w.ref for w in self.windows] + [x.ref for x in self.widgets])
        runs: list[list[int]] = []
        for r in refs:
            if runs and r == runs[-1][1] + 1:
                runs[-1][1] = r
            else:
                runs.append([r, r])
        return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def compose(view: TextView, snapshot: Snapshot) -> TextView:
    """The window list with each window's widgets, refs numbered in text order."""
    ref, windows, widgets = 0, [], []
    for w in view.windows:
        ref += 1
        windows.append(replace(w, ref=ref))
        for x in snapshot.widgets.get(w.xid, ()):
            ref += 1
            widgets.append(replace(x, ref=ref))
    return TextView(tuple(windows), tuple(widgets), snapshot.error)


class WindowView:
    """Reads the window list of one display (see module doc)."""

    def __init__(self, display: Display) -> None:
        self.d = display
        self.root = display.screen().root
        atom = display.intern_atom
        self._stacking = atom("_NET_CLIENT_LIST_STACKING")
        self._active = atom("_NET_ACTIVE_WINDOW")
        self._net_name = atom("_NET_WM_NAME")
        self._utf8 = atom("UTF8_STRING")
        self._pid = atom("_NET_WM_PID")
        self._state = atom("_NET_WM_STATE")
        self._hidden = atom("_NET_WM_STATE_HIDDEN")

    def _prop(self, win, atom: int, kind: int = X.AnyPropertyType):
        try:
            return win.get_full_property(atom, kind)
        except xerror.BadWindow:
            return None

    def client_ids(self) -> list[int]:
        """Managed windows, bottom to top."""
        prop = self._prop(self.root, self._stacking)
        return list(prop.value) if prop is not None else []

    def active_id(self) -> int | None:
        prop = self._prop(self.root, self._active)
        return (
            int(prop.value[0]) if prop is not None and len(prop.value) and prop.value[0] else None
        )

    def title(self, win) -> str:
        prop = self._prop(win, self._net_name, self._utf8)
        if prop is not None and prop.value:
            value = prop.value
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        prop = self._prop(win, Xatom.WM_NAME)
        if prop is not None and prop.value:
            value = prop.value
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
        return ""

    def snapshot(self) -> TextView:
        """The current windows, topmost first, numbered from 1."""
        try:
            return self._snapshot()
        except (xerror.ConnectionClosedError, OSError) as e:
            raise SandboxCrashed(f"the X display went away: {e}") from None

    def _snapshot(self) -> TextView:
        active = self.active_id()
        found: list[Window] = []
        for xid in reversed(self.client_ids()):
            win = self.d.create_resource_object("window", xid)
            try:
                geom = win.get_geometry()
                pos = win.translate_coords(self.root, 0, 0)
                wm_class = win.get_wm_class()
                attrs = win.get_attributes()
            except (xerror.BadWindow, xerror.BadDrawable):
                continue  # closed while we looked
            state = self._prop(win, self._state)
            minimized = (
                state is not None and self._hidden in state.value
            ) or attrs.map_state != X.IsViewable
            pid_prop = self._prop(win, self._pid)
            found.append(
                Window(
                    ref=len(found) + 1,
                    xid=xid,
                    title=self.title(win),
                    wm_class=wm_class[0] if wm_class else "",
                    pid=int(pid_prop.value[0]) if pid_prop is not None and pid_prop.value else None,
                    box=(-pos.x, -pos.y, geom.width, geom.height),
                    focused=xid == active,
                    minimized=minimized,
                )
            )
        return TextView(tuple(found))

    def activate(self, xid: int) -> None:
        """Ask the window manager to raise and focus a window (``_NET_ACTIVE_WINDOW``)."""
        from Xlib.protocol import event

        ev = event.ClientMessage(
            window=self.d.create_resource_object("window", xid),
            client_type=self._active,
            data=(32, [2, X.CurrentTime, 0, 0, 0]),
        )
        mask = X.SubstructureRedirectMask | X.SubstructureNotifyMask
        self.root.send_event(ev, event_mask=mask)
        self.d.sync()
