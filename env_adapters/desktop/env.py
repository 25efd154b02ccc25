"""``DesktopEnv``: the shared GUI interface (:mod:`env_adapters.gui`) over an X11 desktop.

A :class:`DesktopEnv` runs one desktop task (:mod:`env_adapters.desktop.tasks`)
on its own :class:`~env_adapters.desktop.display.Desktop` (Xvfb, openbox,
session D-Bus, private home). The observed area is the whole screen
(``width x height``, default 1280x720).

Lifecycle: the first reset starts the desktop (~0.3 s) and connects to its
accessibility bus (:mod:`env_adapters.desktop.atspi`); every reset then
kills the apps of the previous episode, restores the home directory from its
template, and lets the task set up its files and start its apps (it waits
until their windows are up, focused and answering a ping). ``info["reset_s"]``
reports the time. Close stops everything (nothing is left behind).

Per step: the action goes in through XTEST (:mod:`env_adapters.desktop.input`),
then the env waits for the focused app to handle it (a ``_NET_WM_PING``
round trip plus ``settle_ms`` for the redraw), checks the task's apps, and
observes: screenshot through shared memory (:mod:`env_adapters.desktop.capture`)
and the text view (:mod:`env_adapters.desktop.a11y`): the window list, each
window followed by its widgets over AT-SPI (GTK apps). When the accessibility
bus is down or an app does not answer it within ``a11y_timeout_s``, the view
has the window lines alone and the metadata's ``a11y_error`` says why; the next
reset starts a new accessibility bus if it died.

Actions (text form in :mod:`env_adapters.gui.actions`):

* ``click``/``double_click``/``right_click``/``move``/``drag``/``scroll``
  take screen pixels; a point off the screen is refused (no-op step,
  ``info["action_error"]`` names the screen size);
* ``type(text)`` types character by character (``\\n`` is Enter), at most
  ``max_type_chars`` characters; ``key(combo)`` presses a combo of the shared
  key names (an unknown key is refused, naming the known ones);
* ``click_element(ref)`` on a window activates it and clicks the centre of its
  visible part; on a widget it activates the widget's window (unless it is the
  active one) and clicks the centre of the widget's visible box;
  ``type_element(ref, text)`` on a window activates it and types; on an
  editable text widget it gives it the keyboard focus (AT-SPI ``GrabFocus``,
  else a click), selects all (``ctrl+a``) and types ``text`` over it (an empty
  text deletes it); ``select_element(ref, value)`` picks the option named
  ``value`` (options are named by their first named descendant when they have
  no name): of a list, by a click on that row when it is on the screen (apps act
  on clicks), else through AT-SPI ``Selection``; of a combo box, through
  ``Selection``; refused, with the reason and the options, otherwise;
* ``wait(ms)`` sleeps.

Rewards: the task's checker runs when the agent declares ``done()``
(reward 1 or 0); steps earn 0; the episode ends at ``done()``, ``fail()``
(1 on infeasible tasks) or ``max_steps``.

Bad input: a watched app that exits, stops, or does not answer a ping within
``hang_timeout_s`` ends the episode **truncated** with
``info["farm.truncated_reason"]`` naming the app (the next reset starts the
apps afresh); a checker that raises also truncates with its error; Xvfb or the
window manager dying is a crash (truncated; the next reset relaunches the
desktop).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from env_adapters.desktop.a11y import TextView, Window, WindowView, compose
from env_adapters.desktop.capture import ScreenCapture
from env_adapters.desktop.context import (
    AppFailure,
    CheckerError,
    Pinger,
    TaskContext,
    _ignore_x_error,
)
from env_adapters.desktop.display import Desktop, DesktopConfig, a11y_launcher_available
from env_adapters.desktop.input import XInput
from env_adapters.gui import SandboxCrashed
from env_adapters.gui import actions as A
from env_adapters.gui.env import CheckedGuiEnv
from env_adapters.gui.tasks import TaskLogic, TaskSpec
from farm.errors import ConfigError, MissingExtraError

try:
    from Xlib import display as xdisplay
    from Xlib import error as xerror
except ImportError as e:  # pragma: no cover - depends on the install
    raise MissingExtraError("python-xlib", "desktop") from e

MAX_TYPE_CHARS = 2_000


class DesktopTask(TaskLogic[TaskContext]):
    """What an episode means on a desktop: set up state, give the instruction, check.

    Subclasses override :meth:`setup` (write files, launch apps through the
    context; return the instruction) and :meth:`check` (inspect real state;
    return reward and info).
    """


TaskFactory = Callable[[TaskSpec], DesktopTask]


class DesktopEnv(CheckedGuiEnv):
    """A GUI env over one X11 desktop; see the module doc.

    Args:
        task: a ``kind="desktop"`` task spec.
        desktop_task: its logic (default: looked up by id in :mod:`env_adapters.desktop.tasks`).
        width, height: screen size (= screenshot size).
        action_format: ``"text"`` or ``"structured"``.
        op_timeout_s: bound of every sandbox operation.
        hang_timeout_s: how long an app may take to answer a ping before it counts as hung.
        settle_ms: pause after an action's ping for the app to redraw.
        max_type_chars: longest text ``type``/``type_element`` accept.
        a11y: read widgets over AT-SPI (False: the window list only).
        a11y_timeout_s: how long an observation waits for an app's AT-SPI answers.
    """

    launch_timeout_s = 30.0
    episode_errors = (AppFailure, CheckerError)

    def __init__(
        self,
        task: TaskSpec,
        *,
        desktop_task: DesktopTask | None = None,
        width: int = 1280,
        height: int = 720,
        action_format: str = "text",
        op_timeout_s: float = 20.0,
        hang_timeout_s: float = 3.0,
        settle_ms: int = 30,
        max_type_chars: int = MAX_TYPE_CHARS,
        a11y: bool = True,
        a11y_timeout_s: float = 0.5,
    ) -> None:
        if task.kind != "desktop":
            raise ConfigError(f"DesktopEnv runs desktop tasks, {task.id} is a {task.kind} task")
        super().__init__(
            task, width=width, height=height, action_format=action_format, op_timeout_s=op_timeout_s
        )
        if desktop_task is None:
            from env_adapters.desktop.tasks import task_logic

            desktop_task = task_logic(task)
        self.desktop_task = desktop_task
        self.hang_timeout_s = hang_timeout_s
        self.settle_s = settle_ms / 1000
        self.max_type_chars = max_type_chars
        #: pause between typed characters (``setup["type_delay_ms"]``: galculator drops
        #: a key that repeats within ~100 ms)
        self.type_delay_s = float(task.setup.get("type_delay_ms", 0)) / 1000
        self.desktop = Desktop(DesktopConfig(width=width, height=height, a11y=a11y))
        self.a11y_timeout_s = a11y_timeout_s
        self._atspi: Any = None  # AtspiClient when a11y
        self._a11y_thread: ThreadPoolExecutor | None = None
        self._x: Any = None
        self._input: XInput | None = None
        self._capture: ScreenCapture | None = None
        self._view: WindowView | None = None
        self._pinger: Pinger | None = None
        self.ctx: TaskContext | None = None
        self._last_view = TextView(())

    # ------------------------------------------------------------ CheckedGuiEnv hooks

    def _launch_sync(self) -> None:
        self.desktop.start()
        try:
            self._x = xdisplay.Display(self.desktop.display)
            self._x.set_error_handler(_ignore_x_error)  # e.g. activating a window that closed
            self._input = XInput(self._x, self.width, self.height)
            self._capture = ScreenCapture(self.desktop.display, self.width, self.height)
            self._view = WindowView(self._x)
            self._pinger = Pinger(self.desktop.display)
            if self.desktop.config.a11y:
                from env_adapters.desktop.atspi import AtspiClient  # needs jeepney

                self._atspi = AtspiClient(self.desktop.bus_address, timeout_s=self.a11y_timeout_s)
                self._a11y_thread = ThreadPoolExecutor(1, thread_name_prefix="farm-desktop-a11y")
                self._connect_a11y()
        except BaseException:
            self._shutdown_sync()
            raise

    def _connect_a11y(self) -> None:
        """Connect to the accessibility bus (restarting it when it died); on failure the
        text view lists windows only and says why."""
        from env_adapters.desktop.atspi import A11yError

        client = self._atspi
        if self.desktop.a11y_bus_pid is None and not self.desktop.start_a11y_bus():
            why = "at-spi2-core is not installed" if not a11y_launcher_available() else "no bus"
            client.dead = f"no accessibility bus ({why})"
            return
        try:
            client.connect()
        except A11yError as e:
            client.dead = str(e)

    def _shutdown_sync(self) -> None:
        if self._capture is not None:
            self._capture.close()
        if self._pinger is not None:
            self._pinger.close()
        if self._atspi is not None:
            self._atspi.close()
        if self._a11y_thread is not None:
            self._a11y_thread.shutdown(wait=False)
            self._a11y_thread = None
        if self._x is not None:
            with contextlib.suppress(Exception):
                self._x.close()
        self._x = self._input = self._capture = self._view = self._pinger = self._atspi = None
        self.ctx = None
        self.desktop.close()

    async def aclose(self) -> None:
        await super().aclose()
        await asyncio.to_thread(self._shutdown_sync)  # also a desktop whose launch was cut short

    def _start_episode_sync(self, seed: int | None) -> str:
        assert self._view is not None and self._pinger is not None and self._input is not None
        self.desktop.check()
        self.desktop.kill_apps()
        if self._atspi is not None:
            self._atspi.forget()
            if self._atspi.conn is None or self.desktop.a11y_bus_pid is None:
                self._atspi.close()
                self._connect_a11y()  # the bus died: a new one, before the apps start
        self.desktop.restore_home()
        self.ctx = TaskContext(self.desktop, self._view, self._pinger)
        rng = self._episode_rng(seed)
        try:
            self._input.release_all()
            # the pointer off the apps' windows: one hovering over a widget lights it up
            # (a GTK transition), and the first screenshot would depend on timing
            self._input.move(self.width - 1, self.height - 1)
            instruction = self.desktop_task.setup(self.ctx, rng)
        except (xerror.ConnectionClosedError, OSError) as e:
            raise SandboxCrashed(f"the X display went away: {e}") from None
        self._last_view = TextView(())
        return instruction

    def _perform_sync(self, action: A.Action) -> None:
        assert self._input is not None and self.ctx is not None
        self.desktop.check()
        try:
            self._act(action)
        except A.ActionError:
            raise
        except (xerror.ConnectionClosedError, OSError) as e:
            raise SandboxCrashed(f"the X display went away: {e}") from None
        self._settle()
        self.ctx.health(self.hang_timeout_s)  # AppFailure: a watched app died or hangs

    def _settle(self) -> None:
        """Wait until the focused app took in the input (a ping), then for its redraw."""
        assert self._view is not None and self._pinger is not None
        active = self._view.active_id()
        if active is not None:
            self._pinger.ping(active, self.hang_timeout_s)
        time.sleep(self.settle_s)

    def _checker(self) -> tuple[DesktopTask, TaskContext]:
        assert self.ctx is not None
        self.desktop.check()
        return self.desktop_task, self.ctx

    def _observe_sync(self) -> tuple[np.ndarray, str, dict[str, Any]]:
        assert self._capture is not None and self._view is not None
        self.desktop.check()
        view = self._view.snapshot()
        if self._atspi is not None and self._atspi.conn is not None and self._a11y_thread:
            # the apps answer AT-SPI while the X server copies the screen
            widgets = self._a11y_thread.submit(self._atspi.snapshot, view.windows)
            try:
                pixels = self._capture.grab()
            finally:
                snapshot = widgets.result()
            view = compose(view, snapshot)
        else:
            if self._atspi is not None:
                view = compose(view, self._atspi.snapshot(view.windows))  # says why not
            pixels = self._capture.grab()
        self._last_view = view
        active = view.active
        meta: dict[str, Any] = {
            "display": self.desktop.display,
            "active_window": active.title if active is not None else None,
            "windows": len(view.windows),
            "widgets": len(view.widgets),
        }
        if view.a11y_error is not None:
            meta["a11y_error"] = view.a11y_error
        elif self._atspi is None:
            meta["a11y_error"] = "AT-SPI is off (a11y=False)"
        return pixels, view.text, meta

    async def _truncate(
        self, error: Exception, kind: str = "checker"
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        # the desktop is fine: observe it, end the episode truncated with the reason
        self._crashed = None
        return await super()._truncate(error, "app" if isinstance(error, AppFailure) else kind)

    # ------------------------------------------------------------ actions

    def _center(self, element: Any) -> tuple[int, int]:
        center = element.visible_center(self.width, self.height)
        if center is None:
            raise A.ActionError(f"{_describe(element)} is not on the screen")
        return center

    def _focus_window(self, xid: int) -> None:
        """Activate a window unless it is the active one (an open menu would close)."""
        assert self.ctx is not None and self._view is not None
        if self._view.active_id() != xid:
            self.ctx.focus(xid)

    def _a11y_call(self, element: Any, what: str, fn: Callable[[], Any]) -> Any:
        from env_adapters.desktop.atspi import A11yError

        try:
            return fn()
        except A11yError as e:
            raise A.ActionError(f"{what} {_describe(element)} failed over AT-SPI: {e}") from None

    def _type_into(self, widget: Any, text: str) -> None:
        """Focus an editable text widget, select all, type over it."""
        from env_adapters.desktop.atspi import EDITABLE, A11yError

        inp = self._input
        assert inp is not None
        if "EditableText" not in widget.interfaces or not widget.has(EDITABLE):
            raise A.ActionError(
                f"{_describe(widget)} is not an editable text field; type_element types into "
                "text fields (or a window); click it and use type() otherwise"
            )
        self._focus_window(widget.xid)
        try:
            focused = self._atspi.grab_focus(widget) and self._atspi.focused(widget)
        except A11yError:
            focused = False  # the bus went away since the observation: click instead
        if not focused:
            inp.click(*self._center(widget))
        inp.key("ctrl+a")
        if text:
            inp.type_text(text, delay_s=self.type_delay_s)
        else:
            inp.key("Delete")

    def _select(self, widget: Any, value: str) -> None:
        """Pick an option: a combo box through AT-SPI Selection; a list's row by a click
        on it when it is on the screen (as a person would: apps act on the click), else
        through Selection."""
        from env_adapters.desktop.atspi import SELECT_ROLES

        atspi = self._atspi
        if widget.role not in SELECT_ROLES or "Selection" not in widget.interfaces:
            raise A.ActionError(
                f"{_describe(widget)} has no options: select_element works on combo boxes and "
                "lists (AT-SPI Selection); click it and pick with the mouse or keys otherwise"
            )
        holder, options = self._a11y_call(
            widget, "reading the options of", lambda: atspi.options(widget)
        )
        pick = next((o for o in options if o[1] == value), None)
        if pick is None:
            folded = value.strip().lower()
            pick = next((o for o in options if o[1].strip().lower() == folded), None)
        if pick is None:
            names = ", ".join(json.dumps(o[1]) for o in options) or "none"
            raise A.ActionError(f"{_describe(widget)} has no option {value!r}; options: {names}")
        index, _, ref = pick
        if widget.role != "combo box":
            box = self._a11y_call(widget, "locating an option of", lambda: atspi.extents(ref))
            x, y, w, h = box or (0, 0, 0, 0)
            cx, cy = x + w // 2, y + h // 2
            if box is not None and 0 <= cx < self.width and 0 <= cy < self.height:
                assert self._input is not None
                self._focus_window(widget.xid)
                self._input.click(cx, cy)
                return
        if not self._a11y_call(widget, "selecting in", lambda: atspi.select(holder, index)):
            raise A.ActionError(f"{_describe(widget)} refused to select {value!r}")

    def _act(self, action: A.Action) -> None:
        inp = self._input
        assert inp is not None and self.ctx is not None
        if isinstance(action, A.Click):
            inp.click(action.x, action.y, action.button, action.count)
        elif isinstance(action, A.Move):
            inp.move(action.x, action.y)
        elif isinstance(action, A.Drag):
            inp.drag(action.x, action.y, action.to_x, action.to_y)
        elif isinstance(action, A.Scroll):
            inp.scroll(action.x, action.y, action.dx, action.dy)
        elif isinstance(action, A.TypeText):
            self._check_text(action.text)
            inp.type_text(action.text, delay_s=self.type_delay_s)
        elif isinstance(action, A.Key):
            inp.key(action.combo)
        elif isinstance(action, A.ClickElement):
            element = self._element(action.ref)
            x, y = self._center(element)
            if isinstance(element, Window):
                self.ctx.focus(element.xid)
            else:
                self._focus_window(element.xid)
            inp.click(x, y)
        elif isinstance(action, A.TypeElement):
            self._check_text(action.text)
            element = self._element(action.ref)
            if isinstance(element, Window):
                self._center(element)
                self.ctx.focus(element.xid)
                inp.type_text(action.text, delay_s=self.type_delay_s)
            else:
                self._type_into(element, action.text)
        elif isinstance(action, A.SelectElement):
            element = self._element(action.ref)
            if isinstance(element, Window):
                raise A.ActionError(
                    f"select_element needs a list element (a combo box or list); "
                    f"{_describe(element)} is a window"
                )
            self._select(element, action.value)
        elif isinstance(action, A.Wait):
            self._wait(action)
        else:
            raise A.ActionError(f"{A.format_action(action)} is not performed by the desktop")


def _describe(element: Any) -> str:
    if isinstance(element, Window):
        return f"window {element.ref} ({element.title!r})"
    return f"element {element.ref} ({element.role_token} {json.dumps(element.name[:60])})"
