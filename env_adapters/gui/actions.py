"""The GUI action model shared by every sandbox kind (browser, desktop, Android).

One typed model, two encodings:

* the **text form** for language-model policies, parsed strictly by
  :func:`parse_action` and written by :func:`format_action`::

      click(120, 45)            double_click(120, 45)     right_click(120, 45)
      move(10, 20)              drag(10, 20, 200, 220)    scroll(640, 360, 0, 300)
      type("hello")             key("ctrl+a")             wait(500)
      click_element(12)         type_element(12, "hi")    select_element(3, "Blue")
      done()                    fail()

  Strings are JSON string literals (double quotes, ``\\n``/``\\"``/``\\u00e9``
  escapes); numbers are integers. ``fail()`` declares the task infeasible.
* the **structured form** for small policies, a gymnasium ``Dict`` space (see
  :mod:`env_adapters.gui.spaces`).

Coordinates are screenshot pixels (x to the right, y down); element refs are
the integers shown in the observation's text view.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from typing import ClassVar, Union

from farm.errors import FarmError


class ActionError(FarmError, ValueError):
    """An action that cannot be parsed or performed; the step becomes a no-op."""


@dataclass(frozen=True)
class Click:
    x: int
    y: int
    button: str = "left"  # "left" | "right" | "middle"
    count: int = 1  # 2 = double click

    def text(self) -> str:
        name = {("left", 1): "click", ("left", 2): "double_click", ("right", 1): "right_click"}
        key = (self.button, self.count)
        if key not in name:
            raise ActionError(f"{self} has no text form")
        return f"{name[key]}({self.x}, {self.y})"


@dataclass(frozen=True)
class Move:
    x: int
    y: int
    name: ClassVar[str] = "move"


@dataclass(frozen=True)
class Drag:
    x: int
    y: int
    to_x: int
    to_y: int
    name: ClassVar[str] = "drag"


@dataclass(frozen=True)
class Scroll:
    x: int
    y: int
    dx: int
    dy: int
    name: ClassVar[str] = "scroll"


@dataclass(frozen=True)
class TypeText:
    text: str
    name: ClassVar[str] = "type"


@dataclass(frozen=True)
class Key:
    combo: str  # "ctrl+a", "Enter", "shift+Tab"
    name: ClassVar[str] = "key"


@dataclass(frozen=True)
class ClickElement:
    ref: int
    name: ClassVar[str] = "click_element"


@dataclass(frozen=True)
class TypeElement:
    ref: int
    text: str
    name: ClassVar[str] = "type_element"


@dataclass(frozen=True)
class SelectElement:
    ref: int
    value: str
    name: ClassVar[str] = "select_element"


@dataclass(frozen=True)
class Wait:
    ms: int = 500
    name: ClassVar[str] = "wait"


@dataclass(frozen=True)
class Done:
    name: ClassVar[str] = "done"


@dataclass(frozen=True)
class Fail:
    name: ClassVar[str] = "fail"


Action = Union[  # noqa: UP007 - a runtime alias, used with isinstance
    Click,
    Move,
    Drag,
    Scroll,
    TypeText,
    Key,
    ClickElement,
    TypeElement,
    SelectElement,
    Wait,
    Done,
    Fail,
]

#: text-form name -> (constructor, argument types)
_SIGNATURES: dict[str, tuple[type, tuple[type, ...]]] = {
    "click": (Click, (int, int)),
    "double_click": (Click, (int, int)),
    "right_click": (Click, (int, int)),
    "move": (Move, (int, int)),
    "drag": (Drag, (int, int, int, int)),
    "scroll": (Scroll, (int, int, int, int)),
    "type": (TypeText, (str,)),
    "key": (Key, (str,)),
    "click_element": (ClickElement, (int,)),
    "type_element": (TypeElement, (int, str)),
    "select_element": (SelectElement, (int, str)),
    "wait": (Wait, (int,)),
    "done": (Done, ()),
    "fail": (Fail, ()),
}
ACTION_NAMES: tuple[str, ...] = tuple(_SIGNATURES)
MAX_WAIT_MS = 10_000

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<int>-?\d+)
      | (?P<str>"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*")
      | (?P<comma>,)
      | (?P<close>\))
    )""",
    re.VERBOSE,
)


def _describe(value: object) -> str:
    return "a string" if isinstance(value, str) else "an integer"


def parse_action(text: str) -> Action:
    """Parse the text form; raises :class:`ActionError` naming what is wrong."""
    if not isinstance(text, str):
        raise ActionError(f"an action must be a string, got {type(text).__name__}")
    src = text.strip()
    m = re.match(r"([a-z_]+)\s*\(", src)
    if m is None:
        raise ActionError(
            f"cannot parse action {_clip(text)!r}: expected name(args), e.g. click(10, 20); "
            f"known actions: {', '.join(ACTION_NAMES)}"
        )
    name = m.group(1)
    if name not in _SIGNATURES:
        raise ActionError(f"unknown action {name!r}; known actions: {', '.join(ACTION_NAMES)}")
    pos, args = m.end(), []
    expect_value = True
    while True:
        tok = _TOKEN.match(src, pos)
        if tok is None:
            raise ActionError(f"cannot parse the arguments of {name}() at {_clip(src[pos:])!r}")
        pos = tok.end()
        if tok.group("close") is not None:
            if args and expect_value:
                raise ActionError(f"{name}(): a value is missing after the last comma")
            break
        if tok.group("comma") is not None:
            if expect_value:
                raise ActionError(f"{name}(): unexpected comma")
            expect_value = True
            continue
        if not expect_value:
            raise ActionError(f"{name}(): arguments must be separated by commas")
        args.append(
            int(tok.group("int")) if tok.group("int") is not None else json.loads(tok.group("str"))
        )
        expect_value = False
    if src[pos:].strip():
        raise ActionError(f"unexpected text after {name}(...): {_clip(src[pos:])!r}")
    cls, types = _SIGNATURES[name]
    if len(args) != len(types):
        raise ActionError(f"{name}() takes {len(types)} argument(s), got {len(args)}")
    for i, (arg, typ) in enumerate(zip(args, types, strict=True)):
        if not isinstance(arg, typ):
            raise ActionError(f"{name}(): argument {i + 1} must be {_describe(typ())}, got {arg!r}")
    if name == "double_click":
        return Click(*args, count=2)
    if name == "right_click":
        return Click(*args, button="right")
    action = cls(*args)
    validate(action)
    return action


def validate(action: Action) -> Action:
    """Checks that do not depend on the sandbox (ranges, non-empty keys)."""
    if isinstance(action, Wait) and not 0 <= action.ms <= MAX_WAIT_MS:
        raise ActionError(f"wait(ms) takes 0..{MAX_WAIT_MS} ms, got {action.ms}")
    if isinstance(action, Key) and not action.combo.strip():
        raise ActionError('key() needs a key name, e.g. key("Enter") or key("ctrl+a")')
    if isinstance(action, (ClickElement, TypeElement, SelectElement)) and action.ref < 0:
        raise ActionError(f"element refs are >= 0, got {action.ref}")
    if isinstance(action, Click) and (
        action.button not in ("left", "right", "middle") or action.count not in (1, 2)
    ):
        raise ActionError(f"unsupported click {action}")
    return action


def format_action(action: Action) -> str:
    """The text form of ``action`` (``parse_action(format_action(a)) == a``)."""
    if isinstance(action, Click):
        return action.text()
    values = [getattr(action, f.name) for f in fields(action)]
    args = ", ".join(json.dumps(v) if isinstance(v, str) else str(int(v)) for v in values)
    return f"{action.name}({args})"


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
