"""The text view of an Android screen, from the UI hierarchy (``uiautomator dump``).

``uiautomator dump FILE`` writes the accessibility tree of the windows on the
screen as XML (``<node class= text= content-desc= resource-id= bounds="[x0,y0][x1,y1]"
checkable= checked= clickable= focused= ...>``). :func:`parse` keeps the nodes
an agent can see or use (text, a description, or clickable, checkable,
editable, scrollable), in document order, and numbers them from 1: one line
each, ``[ref] role "name" value="..." flags @(x,y,w,h)``:

* role from the widget class: ``button``, ``switch``, ``checkbox``, ``radio``,
  ``textbox`` (EditText), ``text``, ``image``, ``list``, ``webview``, ``view``;
* name: the content description, else the text (a text box: its hint or
  description, else its resource id's name; a clickable container without
  either, such as a list row: its first text, which is then not listed on its
  own); value: ``on``/``off`` for
  checkable widgets, the text of a text box;
* flags: ``focused``, ``selected``, ``disabled``, ``scrollable``, ``long-clickable``,
  ``password``;
* the box in observation pixels (device pixels scaled by ``scale``).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from env_adapters.gui.spaces import visible_center

_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")
ROLES = {
    "Switch": "switch",
    "SwitchCompat": "switch",
    "SwitchMaterial": "switch",
    "CheckBox": "checkbox",
    "RadioButton": "radio",
    "ToggleButton": "toggle",
    "Button": "button",
    "ImageButton": "button",
    "MaterialButton": "button",
    "FloatingActionButton": "button",
    "EditText": "textbox",
    "AutoCompleteTextView": "textbox",
    "TextInputEditText": "textbox",
    "TextView": "text",
    "CheckedTextView": "text",
    "ImageView": "image",
    "WebView": "webview",
    "RecyclerView": "list",
    "ListView": "list",
    "ScrollView": "list",
}


class UiDumpError(Exception):
    """The device gave no usable hierarchy (uiautomator failed or the XML is broken)."""


@dataclass(frozen=True)
class Element:
    """One line of the text view."""

    ref: int
    role: str
    name: str
    value: str | None
    flags: tuple[str, ...]
    box: tuple[int, int, int, int]  # observation pixels
    cls: str
    resource_id: str
    package: str
    text: str

    @property
    def line(self) -> str:
        value = f" value={json.dumps(self.value)}" if self.value is not None else ""
        flags = "".join(f" {f}" for f in self.flags)
        x, y, w, h = self.box
        return f"[{self.ref}] {self.role} {json.dumps(self.name)}{value}{flags} @({x},{y},{w},{h})"

    def visible_center(self, width: int, height: int) -> tuple[int, int] | None:
        return visible_center(self.box, width, height)


@dataclass(frozen=True)
class UiView:
    """The elements of one screen."""

    elements: tuple[Element, ...] = ()

    @property
    def text(self) -> str:
        return "\n".join(e.line for e in self.elements)

    def by_ref(self, ref: int) -> Element | None:
        if 1 <= ref <= len(self.elements):
            return self.elements[ref - 1]
        return None

    def refs(self) -> str:
        return f"1..{len(self.elements)}" if self.elements else "none (the view is empty)"

    def find(self, name: str, role: str | None = None) -> Element | None:
        return next(
            (e for e in self.elements if e.name == name and (role is None or e.role == role)),
            None,
        )


def role_of(cls: str) -> str:
    return ROLES.get(cls.rsplit(".", 1)[-1], "view")


def extract_xml(output: str) -> str:
    """The ``<hierarchy>`` document of a dump command's output; UiDumpError if none."""
    start = output.find("<?xml")
    if start < 0:
        start = output.find("<hierarchy")
    end = output.rfind("</hierarchy>")
    if start < 0 or end < 0:
        raise UiDumpError(f"uiautomator gave no hierarchy: {output.strip()[:200]!r}")
    return output[start : end + len("</hierarchy>")]


def parse(xml: str, scale: tuple[float, float] = (1.0, 1.0)) -> UiView:
    """The text view of a uiautomator dump; boxes scaled by ``scale`` (observation/device)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise UiDumpError(f"the UI hierarchy is not valid XML: {e}") from None
    sx, sy = scale
    elements: list[Element] = []
    named_by_parent: set[int] = set()  # text nodes whose text names a clickable ancestor
    for node in root.iter("node"):
        if id(node) in named_by_parent:
            continue
        a = node.attrib
        cls = a.get("class", "")
        role = role_of(cls)
        text, desc = a.get("text", ""), a.get("content-desc", "")
        rid = a.get("resource-id", "")
        checkable = a.get("checkable") == "true"
        editable = role == "textbox"
        scrollable = a.get("scrollable") == "true"
        clickable = a.get("clickable") == "true" or a.get("long-clickable") == "true"
        if not (text or desc or clickable or checkable or editable or scrollable):
            continue
        if editable:
            name = a.get("hint", "") or desc or rid.rsplit("/", 1)[-1]
            value: str | None = text
        else:
            name = desc or text
            value = None
            if not name and clickable:  # a row: named by its first text (a list item's title)
                for child in node.iter("node"):
                    label = child.get("content-desc", "") or child.get("text", "")
                    if child is not node and label:
                        name = label
                        if child.get("clickable") != "true" and child.get("checkable") != "true":
                            named_by_parent.add(id(child))
                        break
        if checkable:
            value = "on" if a.get("checked") == "true" else "off"
        if role == "view" and not clickable and not scrollable:
            role = "text"
        flags = tuple(
            flag
            for flag, on in (
                ("focused", a.get("focused") == "true"),
                ("selected", a.get("selected") == "true"),
                ("disabled", a.get("enabled") == "false"),
                ("scrollable", scrollable),
                ("long-clickable", a.get("long-clickable") == "true"),
                ("password", a.get("password") == "true"),
            )
            if on
        )
        m = _BOUNDS.fullmatch(a.get("bounds", ""))
        x0, y0, x1, y1 = (int(v) for v in m.groups()) if m else (0, 0, 0, 0)
        box = (
            round(x0 * sx),
            round(y0 * sy),
            round((x1 - x0) * sx),
            round((y1 - y0) * sy),
        )
        elements.append(
            Element(
                ref=len(elements) + 1,
                role=role,
                name=name,
                value=value,
                flags=flags,
                box=box,
                cls=cls,
                resource_id=rid,
                package=a.get("package", ""),
                text=text,
            )
        )
    return UiView(tuple(elements))
