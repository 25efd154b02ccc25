"""Parsing the text view back into elements (for policies, oracles and tools).

Every GUI sandbox writes its UI as one line per element (see
:mod:`env_adapters.gui.spaces`)::

    [ref] role "name" class="..." value="..." options=[...] focused disabled @(x,y,w,h)

Desktop views indent widgets under their window; lines that do not have this
shape (e.g. "... 12 more elements") are not elements.

Two readers share one scanner:

* :func:`parse_line` / :func:`parse_text_view` are lenient (for policies): a line
  that is not an element is None / skipped, attributes they do not know are ignored;
* :func:`read_line` / :func:`read_text_view` are strict (for oracles, which should
  stop at a view they do not understand): anything off raises :class:`TextViewError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass

from env_adapters.gui.spaces import visible_center

_STR = r'"(?:[^"\\]|\\.)*"'
_HEAD = re.compile(rf"\s*\[(?P<ref>\d+)\]\s+(?P<role>\S+)\s+(?P<name>{_STR})")
_BOX = re.compile(r"@\((?P<x>-?\d+),(?P<y>-?\d+),(?P<w>-?\d+),(?P<h>-?\d+)\)\s*$")
_STRING = re.compile(_STR)
_KEY = re.compile(r"(?P<key>[a-z_]+)=")
_FLAG = re.compile(r"[A-Za-z_][\w-]*(?=\s|$)")
_JSON = json.JSONDecoder()
#: the attributes with a value (``key=...``) that an element line may have
KEYS = ("class", "value", "options")


class TextViewError(ValueError):
    """A text-view line that does not have the documented form."""


@dataclass(frozen=True)
class Element:
    """One element line of a text view."""

    ref: int
    role: str
    name: str
    value: str | None
    box: tuple[int, int, int, int]  # x, y, w, h in screenshot pixels
    cls: str = ""
    options: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()  # the line's flags in order: focused, disabled, selected...
    depth: int = 0  # indentation level (desktop widgets under their window)

    @property
    def focused(self) -> bool:
        return "focused" in self.flags

    @property
    def disabled(self) -> bool:
        return "disabled" in self.flags

    @property
    def checked(self) -> bool:
        return self.value == "checked"

    @property
    def center(self) -> tuple[int, int]:
        x, y, w, h = self.box
        return x + w // 2, y + h // 2

    def visible_center(self, width: int, height: int) -> tuple[int, int] | None:
        """The centre of the part of the box inside a ``width x height`` screen."""
        return visible_center(self.box, width, height)


def _string(text: str, strict: bool) -> str:
    try:
        return str(json.loads(text))
    except ValueError:
        if strict:
            raise TextViewError(f"bad string {text}") from None
        return text.strip('"')


def _scan(line: str, strict: bool, allowed: Collection[str] | None) -> Element:
    """The element of ``line``; TextViewError if it is none. Not ``strict``: attributes
    and words it does not know are passed over. ``allowed``: the flags a strict line may have."""
    head = _HEAD.match(line)
    box = _BOX.search(line, head.end()) if head is not None else None
    if head is None or box is None:
        raise TextViewError(f"not a text-view line: {line!r}")
    fields: dict[str, str | tuple[str, ...]] = {}
    flags: list[str] = []
    pos, end = head.end(), box.start()
    while True:
        while pos < end and line[pos].isspace():
            pos += 1
        if pos >= end:
            break
        key, flag = _KEY.match(line, pos, end), _FLAG.match(line, pos, end)
        if key is not None:
            value, after = _attribute(line, key.end(), end, strict)
            known = key["key"] in KEYS and isinstance(value, tuple) == (key["key"] == "options")
            if value is not None and known:
                fields[key["key"]] = value
            elif strict:
                raise TextViewError(f"bad {key['key']} in {line!r}")
            pos = after if value is not None else _skip(line, pos, end)
        elif flag is not None and (not strict or allowed is None or flag.group() in allowed):
            flags.append(flag.group())
            pos = flag.end()
        elif strict:
            raise TextViewError(f"cannot parse {line[pos:end]!r} in {line!r}")
        else:
            pos = _skip(line, pos, end)
    value, cls, options = fields.get("value"), fields.get("class", ""), fields.get("options", ())
    return Element(
        ref=int(head["ref"]),
        role=head["role"],
        name=_string(head["name"], strict),
        value=value if isinstance(value, str) else None,
        box=(int(box["x"]), int(box["y"]), int(box["w"]), int(box["h"])),
        cls=cls if isinstance(cls, str) else "",
        options=options if isinstance(options, tuple) else (),
        flags=tuple(flags),
        depth=(len(line) - len(line.lstrip(" "))) // 2,
    )


def _attribute(
    line: str, pos: int, end: int, strict: bool
) -> tuple[str | tuple[str, ...] | None, int]:
    """The value of an attribute at ``pos`` (a string, or a list of strings) and where it
    ends; None if there is none."""
    if line.startswith("[", pos):
        try:
            items, after = _JSON.raw_decode(line[:end], pos)
        except ValueError:
            return None, pos
        return (tuple(str(o) for o in items), after) if isinstance(items, list) else (None, pos)
    m = _STRING.match(line, pos, end)
    if m is None:
        return None, pos
    return _string(m.group(), strict), m.end()


def _skip(line: str, pos: int, end: int) -> int:
    """The end of the word at ``pos`` (a token the lenient reader passes over)."""
    while pos < end and not line[pos].isspace():
        pos += 1
    return pos


def parse_line(line: str) -> Element | None:
    """The element of one text-view line, or None if the line is not an element."""
    try:
        return _scan(line, strict=False, allowed=None)
    except TextViewError:
        return None


def parse_text_view(text: str) -> list[Element]:
    """Every element line of ``text``, in order (other lines are skipped)."""
    return [el for el in map(parse_line, text.splitlines()) if el is not None]


def read_line(line: str, *, flags: Collection[str] | None = None) -> Element:
    """The element of one text-view line; :class:`TextViewError` if the line is not
    exactly of the documented form (``flags``: the flags it may have; None: any)."""
    return _scan(line, strict=True, allowed=flags)


def read_text_view(text: str, *, flags: Collection[str] | None = None) -> list[Element]:
    """:func:`read_line` of every line of ``text`` but blank lines and the closing
    ``... N more`` line."""
    return [
        read_line(line, flags=flags)
        for line in text.splitlines()
        if line.strip() and not line.startswith("... ")
    ]
