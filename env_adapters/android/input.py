"""The shared GUI actions as Android input: ``input tap|swipe|text|keyevent|keycombination``.

Pure functions from actions (device pixels) to shell command lines:

* ``click`` -> ``input tap X Y``; ``double_click`` -> two taps; ``right_click`` ->
  a **long press** (``input swipe X Y X Y 600``: a touch screen has no right
  button); ``drag`` -> ``input swipe`` over 300 ms; ``scroll(x, y, dx, dy)`` ->
  a swipe from (x, y) *against* the scroll direction (content moves down when
  the finger moves up), clamped to the screen; ``move`` is refused (no hover
  on a touch screen).
* ``type(text)`` -> ``input text``: spaces travel as ``%s``, each chunk is
  shell-quoted, a ``%`` is sent in a chunk of its own (``input text`` turns
  ``%s`` into a space), ``\\n`` is ``KEYCODE_ENTER``. ``input text`` types
  through the virtual keyboard's key map, which has printable ASCII only: any
  other character (``é``, emoji, tabs) refuses the whole action, naming them.
* ``key(combo)``: Android keys by name (``back``, ``home``, ``recents``,
  ``power``, ``volume_up``, ``volume_down``, ``menu``, ``search``, ``enter``,
  ``wakeup``; ``Home`` is the home button), the shared key names
  (``Enter``, ``Backspace`` = ``KEYCODE_DEL``, arrows, ``Tab``, ``Escape``,
  ``PageUp``...), letters, digits and ASCII symbols; with modifiers
  (``ctrl+a``) through ``input keycombination`` (Android 13+).
"""

from __future__ import annotations

import shlex

from env_adapters.gui import actions as A
from env_adapters.gui.keys import parse_combo

LONG_PRESS_MS = 600
SWIPE_MS = 300
TEXT_CHUNK = 200

#: Android key names (lower case) -> key codes; checked before the shared key names
ANDROID_KEYS: dict[str, int] = {
    "back": 4,
    "home": 3,
    "recents": 187,
    "app_switch": 187,
    "power": 26,
    "volume_up": 24,
    "volume_down": 25,
    "menu": 82,
    "search": 84,
    "enter": 66,
    "wakeup": 224,
    "camera": 27,
}
#: the shared key names (env_adapters.gui.keys) -> key codes
NAMED: dict[str, int] = {
    "Enter": 66,
    "Tab": 61,
    "Backspace": 67,
    "Delete": 112,
    "Escape": 111,
    "Space": 62,
    "ArrowUp": 19,
    "ArrowDown": 20,
    "ArrowLeft": 21,
    "ArrowRight": 22,
    "End": 123,
    "PageUp": 92,
    "PageDown": 93,
    "Insert": 124,
    **{f"F{i}": 130 + i for i in range(1, 13)},
}
MODIFIER_CODES = {"Control": 113, "Shift": 59, "Alt": 57, "Meta": 117}
SYMBOLS = {
    " ": 62, ",": 55, ".": 56, "/": 76, ";": 74, "'": 75, "[": 71, "]": 72, "\\": 73,
    "-": 69, "=": 70, "`": 68, "@": 77, "+": 81, "*": 17, "#": 18,
}  # fmt: skip
KEYCODE_ENTER = 66
KEYCODE_DEL = 67
KEYCODE_MOVE_END = 123


def char_code(ch: str) -> tuple[int, bool] | None:
    """(key code, needs shift) of one character, or None."""
    if "a" <= ch <= "z":
        return 29 + ord(ch) - ord("a"), False
    if "A" <= ch <= "Z":
        return 29 + ord(ch) - ord("A"), True
    if "0" <= ch <= "9":
        return 7 + ord(ch) - ord("0"), False
    if ch in SYMBOLS:
        return SYMBOLS[ch], False
    return None


def key_command(combo: str) -> str:
    """The shell command pressing ``combo``; ActionError for keys Android has not."""
    name = combo.strip()
    if name.lower() in ANDROID_KEYS:
        return f"input keyevent {ANDROID_KEYS[name.lower()]}"
    parsed = parse_combo(name)
    mods = [MODIFIER_CODES[m] for m in parsed.modifiers]
    if parsed.key == "Home":
        code, shift = ANDROID_KEYS["home"], False
    elif parsed.key in NAMED:
        code, shift = NAMED[parsed.key], False
    elif parsed.key in MODIFIER_CODES:
        code, shift = MODIFIER_CODES[parsed.key], False
    else:
        found = char_code(parsed.key)
        if found is None:
            raise A.ActionError(
                f"key({combo!r}): Android has no key for {parsed.key!r}; use type() for text, "
                f"or one of {', '.join(ANDROID_KEYS)}, the shared key names, letters and digits"
            )
        code, shift = found
    if shift and MODIFIER_CODES["Shift"] not in mods:
        mods.append(MODIFIER_CODES["Shift"])
    if not mods:
        return f"input keyevent {code}"
    return "input keycombination " + " ".join(str(c) for c in (*mods, code))


def unsendable(text: str) -> list[str]:
    """The characters of ``text`` that ``input text`` cannot type (distinct, in order)."""
    bad: list[str] = []
    for ch in text:
        if ch == "\n" or " " <= ch <= "~":
            continue
        if ch not in bad:
            bad.append(ch)
    return bad


def text_commands(text: str) -> list[str]:
    """Shell commands typing ``text``; ActionError if a character cannot be typed."""
    bad = unsendable(text)
    if bad:
        shown = ", ".join(repr(c) for c in bad[:10]) + (" ..." if len(bad) > 10 else "")
        raise A.ActionError(
            f"type(): Android's `input text` types printable ASCII only (and \\n as Enter); "
            f"it cannot send {shown}; nothing was typed"
        )
    commands: list[str] = []
    for i, line in enumerate(text.split("\n")):
        if i:
            commands.append(f"input keyevent {KEYCODE_ENTER}")
        for part in _split_percent(line):
            for start in range(0, len(part), TEXT_CHUNK):
                chunk = part[start : start + TEXT_CHUNK].replace(" ", "%s")
                commands.append(f"input text {shlex.quote(chunk)}")
    return commands


def _split_percent(line: str) -> list[str]:
    """``line`` cut so that every ``%`` is a chunk of its own (no chunk contains ``%s``)."""
    parts: list[str] = []
    current = ""
    for ch in line:
        if ch == "%":
            if current:
                parts.append(current)
            parts.append("%")
            current = ""
        else:
            current += ch
    if current:
        parts.append(current)
    return parts


def clear_field_command(length: int) -> str:
    """Move to the end of a focused field and delete ``length`` characters."""
    codes = [KEYCODE_MOVE_END, *([KEYCODE_DEL] * max(0, length))]
    return "input keyevent " + " ".join(str(c) for c in codes)


def tap(x: int, y: int) -> str:
    return f"input tap {x} {y}"


def long_press(x: int, y: int, ms: int = LONG_PRESS_MS) -> str:
    return f"input swipe {x} {y} {x} {y} {ms}"


def swipe(x: int, y: int, to_x: int, to_y: int, ms: int = SWIPE_MS) -> str:
    return f"input swipe {x} {y} {to_x} {to_y} {ms}"


def scroll(x: int, y: int, dx: int, dy: int, width: int, height: int) -> str:
    """A swipe that scrolls the content under (x, y) by (dx, dy) pixels."""
    to_x = min(max(x - dx, 0), width - 1)
    to_y = min(max(y - dy, 0), height - 1)
    if (to_x, to_y) == (x, y):
        raise A.ActionError(f"scroll({x}, {y}, {dx}, {dy}) moves nothing within the screen")
    return swipe(x, y, to_x, to_y)
