"""Typing text as Playwright's ``keyboard.type`` does, with the key events pipelined.

``keyboard.type("hello")`` sends one CDP ``Input.dispatchKeyEvent`` per key down and
per key up and waits for each before the next: two renderer round trips per
character. :func:`type_events` builds the very same events (Playwright's US layout:
a character of the layout is a ``keyDown`` with its text, then a ``keyUp``, with no
modifiers; ``\\n`` and ``\\r`` press Enter; any other character is inserted with
``Input.insertText``), and :func:`send_pipelined` sends them without waiting in
between: the browser's input queue delivers them in order, as before, and the
text costs about one round trip instead of two per character.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

#: events in flight at a time (a 100k-character text is sent in chunks of this many)
WINDOW = 256

# Playwright's usKeyboardLayout, the keys that carry one character:
# code -> (keyCode, key, shifted key); letters and digits are added below.
_PUNCTUATION: dict[str, tuple[int, str, str]] = {
    "Backquote": (192, "`", "~"),
    "Minus": (189, "-", "_"),
    "Equal": (187, "=", "+"),
    "Backslash": (220, "\\", "|"),
    "BracketLeft": (219, "[", "{"),
    "BracketRight": (221, "]", "}"),
    "Semicolon": (186, ";", ":"),
    "Quote": (222, "'", '"'),
    "Comma": (188, ",", "<"),
    "Period": (190, ".", ">"),
    "Slash": (191, "/", "?"),
}
_DIGIT_SHIFTS = ")!@#$%^&*("


def _layout() -> dict[str, tuple[str, int, str]]:
    """Character -> (code, keyCode, key) for every character the layout types."""
    keys: dict[str, tuple[str, int, str]] = {}
    for letter in "abcdefghijklmnopqrstuvwxyz":
        code = f"Key{letter.upper()}"
        keys[letter] = (code, ord(letter.upper()), letter)
        keys[letter.upper()] = (code, ord(letter.upper()), letter.upper())
    for digit, shifted in zip("0123456789", _DIGIT_SHIFTS, strict=True):
        code = f"Digit{digit}"
        keys[digit] = (code, ord(digit), digit)
        keys[shifted] = (code, ord(digit), shifted)
    for code, (key_code, key, shifted) in _PUNCTUATION.items():
        keys[key] = (code, key_code, key)
        keys[shifted] = (code, key_code, shifted)
    keys[" "] = ("Space", 32, " ")
    return keys


LAYOUT = _layout()
_ENTER = ("Enter", 13, "Enter")


def type_events(text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The CDP commands ``(method, params)`` that ``keyboard.type(text)`` sends."""
    for char in text:
        if char in ("\n", "\r"):
            code, key_code, key = _ENTER
            typed = "\r"
        elif char in LAYOUT:
            code, key_code, key = LAYOUT[char]
            typed = char
        else:
            yield "Input.insertText", {"text": char}
            continue
        yield (
            "Input.dispatchKeyEvent",
            {
                "type": "keyDown",
                "modifiers": 0,
                "windowsVirtualKeyCode": key_code,
                "code": code,
                "commands": [],
                "key": key,
                "text": typed,
                "unmodifiedText": typed,
                "autoRepeat": False,
                "location": 0,
                "isKeypad": False,
            },
        )
        yield (
            "Input.dispatchKeyEvent",
            {
                "type": "keyUp",
                "modifiers": 0,
                "key": key,
                "windowsVirtualKeyCode": key_code,
                "code": code,
                "location": 0,
            },
        )


async def send_pipelined(
    send: Callable[[str, dict[str, Any]], Awaitable[Any]],
    commands: Iterator[tuple[str, dict[str, Any]]],
) -> None:
    """Send ``commands`` in order, up to :data:`WINDOW` at a time without waiting for
    their answers (each ``send`` is started in order; the first error is raised)."""
    batch: list[tuple[str, dict[str, Any]]] = []
    for command in commands:
        batch.append(command)
        if len(batch) == WINDOW:
            await asyncio.gather(*(send(m, p) for m, p in batch))
            batch = []
    if batch:
        await asyncio.gather(*(send(m, p) for m, p in batch))
