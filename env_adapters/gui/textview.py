"""Parsing the text view back into elements (for policies and tools).

Every GUI sandbox writes its UI as one line per element (see
:mod:`env_adapters.gui.spaces`)::

    [ref] role "name" class="..." value="..." options=[...] focused disabled @(x,y,w,h)

Desktop views indent widgets under their window; lines that do not have this
shape (e.g. "... 12 more elements") are skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_STR = r'"(?:[^"\\]|\\.)*"'
_LINE = re.compile(
    rf"^\s*\[(?P<ref>\d+)\]\s+(?P<role>\S+)\s+(?P<name>{_STR})(?P<rest>.*?)"
    r"@\((?P<x>-?\d+),(?P<y>-?\d+),(?P<w>-?\d+),(?P<h>-?\d+)\)\s*$"
)
_ATTR = re.compile(rf"(?P<key>[a-z_]+)=(?P<val>{_STR}|\[[^\]]*\])|(?P<flag>[a-z_]+)")


@dataclass(frozen=True)
class Element:
    ref: int
    role: str
    name: str
    value: str | None
    box: tuple[int, int, int, int]
    focused: bool = False
    disabled: bool = False
    cls: str = ""
    options: tuple[str, ...] = ()
    depth: int = 0  # indentation level (desktop widgets under their window)


def _loads(text: str) -> str:
    try:
        return str(json.loads(text))
    except ValueError:
        return text.strip('"')


def parse_line(line: str) -> Element | None:
    """The element of one text-view line, or None if the line is not an element."""
    m = _LINE.match(line)
    if m is None:
        return None
    value: str | None = None
    cls, options, flags = "", (), set()
    for a in _ATTR.finditer(m.group("rest")):
        if a.group("flag"):
            flags.add(a.group("flag"))
        elif a.group("key") == "value":
            value = _loads(a.group("val"))
        elif a.group("key") == "class":
            cls = _loads(a.group("val"))
        elif a.group("key") == "options":
            try:
                options = tuple(str(o) for o in json.loads(a.group("val")))
            except ValueError:
                options = ()
    indent = len(line) - len(line.lstrip(" "))
    return Element(
        ref=int(m.group("ref")),
        role=m.group("role"),
        name=_loads(m.group("name")),
        value=value,
        box=(int(m.group("x")), int(m.group("y")), int(m.group("w")), int(m.group("h"))),
        focused="focused" in flags,
        disabled="disabled" in flags,
        cls=cls,
        options=options,
        depth=indent // 2,
    )


def parse_text_view(text: str) -> list[Element]:
    """Every element line of ``text``, in order."""
    out = []
    for line in text.splitlines():
        el = parse_line(line)
        if el is not None:
            out.append(el)
    return out
