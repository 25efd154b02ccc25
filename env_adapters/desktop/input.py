"""Mouse and keyboard input through the XTEST extension (python-xlib).

:class:`XInput` moves the pointer, presses buttons (1-3; the wheel is buttons
4-7), and types: key combos from the shared key names
(:func:`env_adapters.gui.keys.parse_combo`) and text character by character.
A character the keyboard map does not have (``é``, ``€``, ...) is bound to a
spare keycode for the time of its key press, as xdotool does.

Bad input is an :class:`~env_adapters.gui.ActionError`: a point outside the
screen names the screen size; an unknown key names the known ones. A lost X
connection is :class:`~env_adapters.gui.SandboxCrashed`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from Xlib import XK, X
from Xlib import error as xerror
from Xlib.display import Display
from Xlib.ext import xtest

from env_adapters.gui import ActionError, SandboxCrashed
from env_adapters.gui.keys import KeyCombo, parse_combo

#: shared modifier names -> X keysym names
MODIFIER_KEYSYMS = {"Control": "Control_L", "Shift": "Shift_L", "Alt": "Alt_L", "Meta": "Super_L"}
#: shared named keys -> X keysym names
NAMED_KEYSYMS = {
    "Enter": "Return",
    "Tab": "Tab",
    "Backspace": "BackSpace",
    "Delete": "Delete",
    "Escape": "Escape",
    "Space": "space",
    "ArrowUp": "Up",
    "ArrowDown": "Down",
    "ArrowLeft": "Left",
    "ArrowRight": "Right",
    "Home": "Home",
    "End": "End",
    "PageUp": "Prior",
    "PageDown": "Next",
    "Insert": "Insert",
    **{f"F{i}": f"F{i}" for i in range(1, 13)},
    **MODIFIER_KEYSYMS,
}
BUTTONS = {"left": 1, "middle": 2, "right": 3}
#: one wheel "click" per this many pixels of scroll delta (as browsers count it)
WHEEL_STEP_PX = 100
MAX_WHEEL_CLICKS = 200
#: text control characters -> keysym names
_CONTROL_CHARS = {"\n": "Return", "\t": "Tab", "\b": "BackSpace"}


def char_keysym(char: str) -> int:
    """The X keysym of a character (Latin-1 directly, others as Unicode keysyms)."""
    if char in _CONTROL_CHARS:
        return XK.string_to_keysym(_CONTROL_CHARS[char])
    code = ord(char)
    if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF:
        return code
    return 0x01000000 | code


class XInput:
    """XTEST input on one X display connection (see module doc)."""

    def __init__(self, display: Display, width: int, height: int) -> None:
        self.d = display
        self.width, self.height = width, height
        self._shift = self.d.keysym_to_keycode(XK.string_to_keysym("Shift_L"))
        self._spare = self._find_spare_keycode()

    def _find_spare_keycode(self) -> int | None:
        first = self.d.display.info.min_keycode
        count = self.d.display.info.max_keycode - first + 1
        mapping = self.d.get_keyboard_mapping(first, count)
        for i in range(count - 1, -1, -1):
            if not any(mapping[i]):
                return first + i
        return None

    # ------------------------------------------------------------ plumbing

    def _flush(self) -> None:
        try:
            self.d.sync()
        except (xerror.ConnectionClosedError, OSError) as e:
            raise SandboxCrashed(f"the X display went away: {e}") from None

    def check_point(self, x: int, y: int, what: str) -> None:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise ActionError(
                f"{what} ({x}, {y}) is outside the {self.width}x{self.height} screen: "
                f"x must be in 0..{self.width - 1} and y in 0..{self.height - 1}"
            )

    def _motion(self, x: int, y: int) -> None:
        xtest.fake_input(self.d, X.MotionNotify, x=int(x), y=int(y))

    def _button(self, button: int, down: bool) -> None:
        xtest.fake_input(self.d, X.ButtonPress if down else X.ButtonRelease, button)

    def _key(self, keycode: int, down: bool) -> None:
        xtest.fake_input(self.d, X.KeyPress if down else X.KeyRelease, keycode)

    # ------------------------------------------------------------ mouse

    def move(self, x: int, y: int) -> None:
        self.check_point(x, y, "move")
        self._motion(x, y)
        self._flush()

    def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None:
        self.check_point(x, y, "click")
        if button not in BUTTONS:
            raise ActionError(f"unknown mouse button {button!r}; use left, middle or right")
        self._motion(x, y)
        for _ in range(count):
            self._button(BUTTONS[button], True)
            self._button(BUTTONS[button], False)
        self._flush()

    def drag(self, x: int, y: int, to_x: int, to_y: int, steps: int = 10) -> None:
        self.check_point(x, y, "drag start")
        self.check_point(to_x, to_y, "drag end")
        self._motion(x, y)
        self._button(1, True)
        self._flush()
        for i in range(1, steps + 1):
            self._motion(x + (to_x - x) * i // steps, y + (to_y - y) * i // steps)
            self._flush()
            time.sleep(0.005)
        self._button(1, False)
        self._flush()

    def scroll(self, x: int, y: int, dx: int, dy: int) -> None:
        """Wheel at (x, y): one click per :data:`WHEEL_STEP_PX` pixels (at least one)."""
        self.check_point(x, y, "scroll")
        self._motion(x, y)
        for delta, (neg, pos) in ((dy, (4, 5)), (dx, (6, 7))):
            if delta == 0:
                continue
            clicks = min(MAX_WHEEL_CLICKS, max(1, abs(delta) // WHEEL_STEP_PX))
            button = pos if delta > 0 else neg
            for _ in range(clicks):
                self._button(button, True)
                self._button(button, False)
        self._flush()

    # ------------------------------------------------------------ keyboard

    def _keysym(self, name: str) -> int:
        keysym = XK.string_to_keysym(name)
        if keysym == 0:
            raise ActionError(f"the X keyboard has no key {name!r}")
        return keysym

    def _combo_keysyms(self, combo: KeyCombo) -> tuple[list[int], int]:
        mods = [self._keysym(MODIFIER_KEYSYMS[m]) for m in combo.modifiers]
        if len(combo.key) == 1:
            key = char_keysym(combo.key)
        else:
            key = self._keysym(NAMED_KEYSYMS[combo.key])
        return mods, key

    @contextmanager
    def _keycode_for(self, keysym: int) -> Iterator[tuple[int, bool]]:
        """A keycode that types ``keysym`` and whether Shift is needed (binds a spare one)."""
        for keycode, index in self.d.keysym_to_keycodes(keysym):
            if index in (0, 1):
                yield keycode, index == 1
                return
        if self._spare is None:
            raise ActionError(f"cannot type keysym {keysym:#x}: no spare keycode to bind it to")
        self.d.change_keyboard_mapping(self._spare, [(keysym, keysym)])
        self._flush()
        time.sleep(0.02)  # let clients see the MappingNotify before the key arrives
        try:
            yield self._spare, False
        finally:
            self._flush()
            time.sleep(0.02)
            self.d.change_keyboard_mapping(self._spare, [(0, 0)])
            self._flush()

    def key(self, combo: str) -> None:
        """Press and release a combo (``"ctrl+s"``, ``"Enter"``, ``"alt+F4"``)."""
        mods, key = self._combo_keysyms(parse_combo(combo))
        mod_codes = [self.d.keysym_to_keycode(m) for m in mods]
        with self._keycode_for(key) as (keycode, shifted):
            if shifted and self._shift not in mod_codes and len(parse_combo(combo).key) == 1:
                mod_codes.append(self._shift)
            for code in mod_codes:
                self._key(code, True)
            self._key(keycode, True)
            self._key(keycode, False)
            for code in reversed(mod_codes):
                self._key(code, False)
            self._flush()

    def type_text(self, text: str, chunk: int = 64, delay_s: float = 0.0) -> None:
        """Type ``text`` character by character (``\\n`` is Enter, ``\\t`` Tab),
        ``delay_s`` apart (apps such as galculator drop keys that come too fast)."""
        for i, char in enumerate(text):
            if delay_s and i:
                self._flush()
                time.sleep(delay_s)
            keysym = char_keysym(char)
            with self._keycode_for(keysym) as (keycode, shifted):
                if shifted:
                    self._key(self._shift, True)
                self._key(keycode, True)
                self._key(keycode, False)
                if shifted:
                    self._key(self._shift, False)
            if i % chunk == chunk - 1:
                self._flush()
                time.sleep(0.002)  # let the app drain its queue
        self._flush()

    def release_all(self) -> None:
        """Release modifiers and buttons (after a failed action, so none stays down)."""
        for name in MODIFIER_KEYSYMS.values():
            self._key(self.d.keysym_to_keycode(self._keysym(name)), False)
        for button in (1, 2, 3):
            self._button(button, False)
        self._flush()
