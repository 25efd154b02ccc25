"""Gymnasium spaces of the shared GUI interface.

Observation (every GUI sandbox)::

    Dict(
      screenshot  = Box(0, 255, (H, W, 3), uint8),
      text        = Text(0..MAX_TEXT)     # the UI as text: one element per line (see below)
      instruction = Text(0..MAX_INSTRUCTION)
      metadata    = Text(0..MAX_METADATA)  # JSON: url/app/activity, step, last action error...
    )

The text view has one line per element: ``[ref] role "name" value="..." @(x,y,w,h)``
with the element's ref (for ``click_element`` etc.), its role, accessible name,
current value (when it has one) and bounding box in screenshot pixels.

Actions: ``action_format="text"`` serves ``Text(1..MAX_ACTION_TEXT)`` (the text
form, see :mod:`env_adapters.gui.actions`); ``"structured"`` serves
:func:`structured_action_space`, converted with :func:`from_structured`.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

from env_adapters.gui import actions as A

#: characters of every text observation/action; others are replaced by "?"
CHARSET = frozenset(
    string.printable
    + "".join(chr(c) for c in range(0xA0, 0x180))
    + "\u2013\u2014\u2018\u2019\u201c\u201d\u2026\u20ac"
)
MAX_TEXT = 1 << 16
MAX_INSTRUCTION = 2048
MAX_METADATA = 4096
MAX_ACTION_TEXT = 1 << 20  # type() of a megabyte must parse (and be refused with a reason)
MAX_STRUCTURED_TEXT = 256
MAX_REF = 4096
COORD_LIMIT = 1 << 14

#: structured ``kind`` index -> text-form name
KINDS: tuple[str, ...] = A.ACTION_NAMES


def sanitize(text: str, limit: int) -> str:
    """``text`` restricted to :data:`CHARSET` and ``limit`` characters."""
    if not all(c in CHARSET for c in text):
        text = "".join(c if c in CHARSET else "?" for c in text)
    return text[:limit]


def visible_center(
    box: tuple[int, int, int, int], width: int, height: int
) -> tuple[int, int] | None:
    """The centre of the part of ``box`` (x, y, w, h, as a text-view line's ``@(...)``)
    inside a ``width x height`` screen; None if no part of it is."""
    x, y, w, h = box
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, width), min(y + h, height)
    if x1 <= x0 or y1 <= y0:
        return None
    return (x0 + x1 - 1) // 2, (y0 + y1 - 1) // 2


def observation_space(width: int, height: int) -> spaces.Dict:
    return spaces.Dict(
        {
            "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
            "text": spaces.Text(MAX_TEXT, min_length=0, charset=CHARSET),
            "instruction": spaces.Text(MAX_INSTRUCTION, min_length=0, charset=CHARSET),
            "metadata": spaces.Text(MAX_METADATA, min_length=0, charset=CHARSET),
        }
    )


def text_action_space() -> spaces.Text:
    return spaces.Text(MAX_ACTION_TEXT, min_length=1, charset=CHARSET)


def structured_action_space() -> spaces.Dict:
    """``kind`` selects the action; ``coords`` holds x, y, x2|dx, y2|dy; ``ref`` an element;
    ``text`` the typed text, key combo or select value; ``ms`` the wait."""
    return spaces.Dict(
        {
            "kind": spaces.Discrete(len(KINDS)),
            "coords": spaces.Box(-COORD_LIMIT, COORD_LIMIT, (4,), np.int32),
            "ref": spaces.Discrete(MAX_REF),
            "text": spaces.Text(MAX_STRUCTURED_TEXT, min_length=0, charset=CHARSET),
            "ms": spaces.Discrete(A.MAX_WAIT_MS + 1),
        }
    )


def from_structured(value: dict[str, Any]) -> A.Action:
    """The action a structured-space value stands for (raises :class:`ActionError`)."""
    kind = KINDS[int(value["kind"])]
    x, y, x2, y2 = (int(v) for v in value["coords"])
    ref, text, ms = int(value["ref"]), str(value["text"]), int(value["ms"])
    made: A.Action
    match kind:
        case "click":
            made = A.Click(x, y)
        case "double_click":
            made = A.Click(x, y, count=2)
        case "right_click":
            made = A.Click(x, y, button="right")
        case "move":
            made = A.Move(x, y)
        case "drag":
            made = A.Drag(x, y, x2, y2)
        case "scroll":
            made = A.Scroll(x, y, x2, y2)
        case "type":
            made = A.TypeText(text)
        case "key":
            made = A.Key(text)
        case "click_element":
            made = A.ClickElement(ref)
        case "type_element":
            made = A.TypeElement(ref, text)
        case "select_element":
            made = A.SelectElement(ref, text)
        case "wait":
            made = A.Wait(ms)
        case "done":
            made = A.Done()
        case _:
            made = A.Fail()
    return A.validate(made)


def to_structured(action: A.Action) -> dict[str, Any]:
    """The structured-space value of ``action`` (inverse of :func:`from_structured`)."""
    name = A.format_action(action).split("(", 1)[0]
    coords = np.zeros(4, np.int32)
    value: dict[str, Any] = {
        "kind": np.int64(KINDS.index(name)),
        "coords": coords,
        "ref": np.int64(0),
        "text": "",
        "ms": np.int64(0),
    }
    if isinstance(action, (A.Click, A.Move)):
        coords[:2] = (action.x, action.y)
    elif isinstance(action, A.Drag):
        coords[:] = (action.x, action.y, action.to_x, action.to_y)
    elif isinstance(action, A.Scroll):
        coords[:] = (action.x, action.y, action.dx, action.dy)
    elif isinstance(action, A.TypeText):
        value["text"] = action.text
    elif isinstance(action, A.Key):
        value["text"] = action.combo
    elif isinstance(action, (A.ClickElement, A.TypeElement, A.SelectElement)):
        value["ref"] = np.int64(action.ref)
        if isinstance(action, A.TypeElement):
            value["text"] = action.text
        elif isinstance(action, A.SelectElement):
            value["text"] = action.value
    elif isinstance(action, A.Wait):
        value["ms"] = np.int64(action.ms)
    return value
