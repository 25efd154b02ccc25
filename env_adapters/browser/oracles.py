"""Scripted oracle policies for MiniWoB++ tasks (``miniwob/<task>``).

An oracle sees only what any agent sees, the observation (``obs["instruction"]``,
``obs["text"]``, ``obs["screenshot"]``), never the page, and answers one action
in the shared text form (:mod:`env_adapters.gui.actions`) per step::

    oracle = ORACLES["miniwob/click-button"]()
    action = oracle.act(obs)            # e.g. 'click_element(3)'

Oracles are stateful within an episode (a new one per episode, or
:meth:`Oracle.reset`). Some address elements by ref (``click_element``,
``type_element``, ``select_element``), others by the pixel centre of the
element's box in the text view (``click``, ``scroll``), so both encodings are
exercised; :data:`ENCODING` says which. Where the page changes on its own
(animations, autocomplete menus) they ``wait(ms)`` and look again. When the
instruction asks for something the page does not show (the
``miniwob/<task>-infeasible`` variants) they answer ``fail()``.

:func:`parse_text_view` turns the text view into :class:`Element` records (the
strict reader of :mod:`env_adapters.gui.textview`, with MiniWoB's flags);
:func:`run_episode` plays one episode. From the shell::

    python -m env_adapters.browser.oracles miniwob/click-tab --seeds 10 [--address ADDR]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Iterable
from typing import Any, ClassVar

from env_adapters.gui import oracles as gui_oracles
from env_adapters.gui import textview
from env_adapters.gui.oracles import (
    FAIL,
    OracleError,
    Policy,
    PolicyOracle,
    click,
    click_element,
    key,
    scroll,
    select_element,
    type_element,
    type_text,
    wait,
)
from env_adapters.gui.textview import Element
from env_adapters.gui.textview import TextViewError as TextViewError  # what parse_line raises

#: the observed area of MiniWoB envs when the screenshot does not say
DEFAULT_SIZE = (160, 210)
#: the instruction box at the top of every MiniWoB page (its elements are not the task's)
QUERY_HEIGHT = 50

# ---------------------------------------------------------------- the text view

#: the flags of MiniWoB's text view (a line with another one is not understood)
FLAGS = ("focused", "disabled")


def parse_line(line: str) -> Element:
    """``[ref] role "name" [class=".."] [value=".."] [options=[..]] [focused] [disabled]
    @(x,y,w,h)`` -> :class:`Element` (:class:`TextViewError` otherwise)."""
    return textview.read_line(line, flags=FLAGS)


def parse_text_view(text: str) -> list[Element]:
    """Every element line of a text view (the closing "... N more" line is skipped)."""
    return textview.read_text_view(text, flags=FLAGS)


class View:
    """One observation, parsed: the elements plus lookups by role and name."""

    def __init__(self, obs: dict[str, Any]) -> None:
        self.obs = obs
        self.instruction = str(obs.get("instruction", ""))
        self.elements = parse_text_view(str(obs.get("text", "")))
        shot = obs.get("screenshot")
        shape = getattr(shot, "shape", None)
        self.width, self.height = (int(shape[1]), int(shape[0])) if shape else DEFAULT_SIZE

    def find(
        self,
        role: str | Iterable[str] | None = None,
        name: str | None = None,
        *,
        where: Callable[[Element], bool] | None = None,
        task_area: bool = True,
    ) -> list[Element]:
        """Elements with this role (or one of these roles) and exactly this name;
        ``task_area`` leaves out the instruction box at the top."""
        roles = {role} if isinstance(role, str) else set(role) if role is not None else None
        return [
            e
            for e in self.elements
            if (roles is None or e.role in roles)
            and (name is None or e.name == name)
            and (where is None or where(e))
            and (not task_area or e.box[1] >= QUERY_HEIGHT)
        ]

    def first(
        self, role: str | Iterable[str] | None = None, name: str | None = None, **kw: Any
    ) -> Element | None:
        """The first of :meth:`find`'s elements, or None."""
        found = self.find(role, name, **kw)
        return found[0] if found else None

    def point(self, element: Element) -> tuple[int, int]:
        """Where to click ``element``: the centre of its part on screen."""
        p = element.visible_center(self.width, self.height)
        if p is None:
            raise OracleError(f"element {element.ref} ({element.name!r}) is not on screen")
        return p


# ---------------------------------------------------------------- action text


def click_at(view: View, element: Element) -> str:
    """A pixel click on the centre of ``element``'s visible part."""
    return click(*view.point(element))


# ---------------------------------------------------------------- oracles


class Oracle(PolicyOracle[View]):
    """Base of the MiniWoB++ policies (:class:`~env_adapters.gui.oracles.PolicyOracle`)."""

    #: "refs", "coords" or "mixed": how the oracle addresses elements
    encoding: ClassVar[str] = "refs"

    def read(self, obs: dict[str, Any]) -> View:
        return View(obs)

    def not_ready(self, view: View, ms: int) -> str:
        return f"the page did not get ready within {ms} ms"

    def wait_stable(
        self, obs: dict[str, Any], watch: Callable[[View], Any], *, ms: int = 100, tries: int = 30
    ) -> Generator[str, dict[str, Any], View]:
        """``wait(ms)`` until ``watch(view)`` is the same in two observations in a row."""
        view = View(obs)
        last = watch(view)
        for _ in range(tries):
            view = View((yield wait(ms)))
            now = watch(view)
            if now == last:
                return view
            last = now
        raise OracleError(f"the page did not settle within {ms * tries} ms")


def _submit(view: View, name: str = "Submit") -> Element:
    button = view.first("button", name)
    if button is None:
        raise OracleError(f"no {name!r} button in the text view")
    return button


class ClickButtonOracle(Oracle):
    """click-button: click the button named in the instruction (by ref)."""

    task = "miniwob/click-button"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        target = self.parse(r'Click on the "(.*)" button\.', view.instruction).group(1)
        button = view.first("button", target)
        yield FAIL if button is None else click_element(button)


class ClickLinkOracle(Oracle):
    """click-link: click the word-link named in the instruction (pixel centre)."""

    task = "miniwob/click-link"
    encoding = "coords"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        target = self.parse(r'Click on the link "(.*)"\.', view.instruction).group(1)
        link = view.first(("span", "link", "a"), target)
        yield FAIL if link is None else click_at(view, link)


class ClickTabOracle(Oracle):
    """click-tab: click the tab named in the instruction (by ref)."""

    task = "miniwob/click-tab"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        number = self.parse(r"Click on Tab #(\d+)\.", view.instruction).group(1)
        tab = view.first("tab", f"Tab #{number}")
        yield FAIL if tab is None else click_element(tab)


def _select_list(text: str) -> set[str]:
    """``"A, B, C"`` -> the names; ``"nothing"`` -> none."""
    return set() if text == "nothing" else set(text.split(", "))


class ClickCheckboxesOracle(Oracle):
    """click-checkboxes: set every checkbox as asked, then Submit (pixel centres)."""

    task = "miniwob/click-checkboxes"
    encoding = "coords"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        wanted = _select_list(self.parse(r"Select (.*) and click Submit\.", view.instruction)[1])
        names = {box.name for box in view.find("checkbox")}
        if not wanted <= names:
            yield FAIL
            return
        for _ in range(3):  # set, then check the page took every click
            wrong = [b for b in view.find("checkbox") if b.checked != (b.name in wanted)]
            if not wrong:
                break
            for box in wrong:
                view = View((yield click_at(view, box)))
        else:
            raise OracleError("the checkboxes do not keep their state")
        yield click_at(view, _submit(view))


class ClickOptionOracle(Oracle):
    """click-option: check the radio button named in the instruction, then Submit (refs)."""

    task = "miniwob/click-option"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        target = self.parse(r"Select (.*) and click Submit\.", view.instruction).group(1)
        radio = view.first("radio", target)
        if radio is None:
            yield FAIL
            return
        view = View((yield click_element(radio)))
        if not view.first("radio", target, where=lambda e: e.checked):
            raise OracleError(f"radio {target!r} did not get checked")
        yield click_element(_submit(view))


class EnterTextOracle(Oracle):
    """enter-text: type the text into the field (type_element), then Submit (refs)."""

    task = "miniwob/enter-text"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        text = self.parse(r'Enter "(.*)" into the text field and press Submit\.', view.instruction)[
            1
        ]
        field = view.first("textbox")
        if field is None:
            raise OracleError("no text field")
        view = View((yield type_element(field, text)))
        if view.first("textbox", where=lambda e: e.value == text) is None:
            raise OracleError(f"the field does not hold {text!r}")
        yield click_element(_submit(view))


class EnterPasswordOracle(Oracle):
    """enter-password: click each field, type the password, click Submit (pixels + type)."""

    task = "miniwob/enter-password"
    encoding = "coords"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        password = self.parse(
            r'Enter the password "(.*)" into both text fields and press submit\.',
            view.instruction,
        )[1]
        fields = view.find("textbox")
        if len(fields) != 2:
            raise OracleError(f"expected two password fields, found {len(fields)}")
        for field in fields:
            view = View((yield click_at(view, field)))
            now = next(e for e in view.elements if e.ref == field.ref)
            if not now.focused:
                raise OracleError(f"field {field.ref} did not take the focus")
            view = View((yield type_text(password)))
        if [e.value for e in view.find("textbox")] != [password, password]:
            raise OracleError("the fields do not hold the password")
        yield click_at(view, _submit(view))


def _field_after_label(view: View, label: str) -> Element:
    """The first textbox after the label ``label`` in document order."""
    seen = False
    for e in view.elements:
        if e.role == "label" and e.name == label:
            seen = True
        elif seen and e.role == "textbox":
            return e
    field = view.first("textbox", label)  # a field the label names
    if field is None:
        raise OracleError(f"no text field labelled {label!r}")
    return field


class LoginUserOracle(Oracle):
    """login-user: type_element the username and password, click Login (refs)."""

    task = "miniwob/login-user"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        m = self.parse(
            r'Enter the username "(.*)" and the password "(.*)" into the text fields '
            r"and press login\.",
            view.instruction,
        )
        user, password = m.group(1), m.group(2)
        view = View((yield type_element(_field_after_label(view, "Username"), user)))
        view = View((yield type_element(_field_after_label(view, "Password"), password)))
        got = (
            _field_after_label(view, "Username").value,
            _field_after_label(view, "Password").value,
        )
        if got != (user, password):
            raise OracleError(f"the fields hold {got}, not {(user, password)}")
        yield click_element(_submit(view, "Login"))


class ChooseListOracle(Oracle):
    """choose-list: select_element the option, then Submit (refs)."""

    task = "miniwob/choose-list"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        target = self.parse(r"Select (.*) from the list and click Submit\.", view.instruction)[1]
        select = view.first("combobox")
        if select is None:
            raise OracleError("no drop-down list")
        if target not in (select.options or ()):
            yield FAIL
            return
        view = View((yield select_element(select, target)))
        if view.first("combobox", where=lambda e: e.value == target) is None:
            raise OracleError(f"{target!r} did not get selected")
        yield click_element(_submit(view))


class ClickDialogOracle(Oracle):
    """click-dialog: click the dialog's close button (pixel centre)."""

    task = "miniwob/click-dialog"
    encoding = "coords"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        self.parse(r'Close the dialog box by clicking the "x"\.', view.instruction)
        close = view.first("button", "Close")
        if close is None:
            raise OracleError("no dialog close button")
        yield click_at(view, close)


class ScrollText2Oracle(Oracle):
    """scroll-text-2: scroll the text area with the mouse wheel to the top or bottom,
    then click Submit (pixel coordinates)."""

    task = "miniwob/scroll-text-2"
    encoding = "coords"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        where = self.parse(
            r"Scroll the textarea to the (top|bottom) of the text hit submit\.", view.instruction
        )[1]
        area = view.first("textbox")
        if area is None:
            raise OracleError("no text area")
        x, y = view.point(area)
        # far more than the text is long: the wheel stops at the end
        view = View((yield scroll(x, y, 0, 20_000 if where == "bottom" else -20_000)))
        yield click_at(view, _submit(view))


class FocusTextOracle(Oracle):
    """focus-text: click into the text box (pixel centre)."""

    task = "miniwob/focus-text"
    encoding = "coords"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        self.parse(r"Focus into the textbox\.", view.instruction)
        field = view.first("textbox")
        if field is None:
            raise OracleError("no text box")
        yield click_at(view, field)


def _uncovered_point(view: View, element: Element, cover: Element) -> tuple[int, int]:
    """A point of ``element`` (on screen) that ``cover`` (drawn above it) does not hide."""
    x, y, w, h = element.box
    cx, cy, cw, ch = cover.box

    def hidden(px: int, py: int) -> bool:
        return cx <= px < cx + cw and cy <= py < cy + ch

    center = view.point(element)
    if not hidden(*center):
        return center
    # scan the element's box from its centre outwards, a few pixels in from its edges
    best: tuple[int, tuple[int, int]] | None = None
    for py in range(max(y + 3, 0), min(y + h - 3, view.height)):
        for px in range(max(x + 3, 0), min(x + w - 3, view.width)):
            if not hidden(px, py):
                d = abs(px - center[0]) + abs(py - center[1])
                if best is None or d < best[0]:
                    best = (d, (px, py))
    if best is None:
        raise OracleError(f"element {element.ref} is entirely covered by {cover.ref}")
    return best[1]


class ClickButtonSequenceOracle(Oracle):
    """click-button-sequence: click ONE where TWO does not cover it, then TWO (pixels)."""

    task = "miniwob/click-button-sequence"
    encoding = "coords"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        self.parse(r"Click button ONE, then click button TWO\.", view.instruction)
        one, two = view.first("button", "ONE"), view.first("button", "TWO")
        if one is None or two is None:
            raise OracleError("buttons ONE and TWO are not both shown")
        view = View((yield click(*_uncovered_point(view, one, two))))
        two = view.first("button", "TWO") or two
        yield click_at(view, two)


class ClickCollapsibleOracle(Oracle):
    """click-collapsible: expand the section (by ref), wait until its animation ends,
    then click Submit where it ended up (pixel centre)."""

    task = "miniwob/click-collapsible"
    encoding = "mixed"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        self.parse(r"Expand the section below and click submit\.", view.instruction)
        header = view.first("tab", where=lambda e: e.name.startswith("Section #"))
        if header is None:
            raise OracleError("no section header")
        obs = yield click_element(header)

        def submit_box(v: View) -> tuple[int, int, int, int] | None:
            button = v.first("button", "Submit")
            return None if button is None else button.box

        view = yield from self.wait_stable(obs, submit_box)
        yield click_at(view, _submit(view))


class UseAutocompleteOracle(Oracle):
    """use-autocomplete: type the prefix (type_element), wait for the suggestions,
    pick one with the asked ending (click_element, or arrow keys if it is off
    screen), then Submit (refs)."""

    task = "miniwob/use-autocomplete"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        m = self.parse(
            r'Enter an item that starts with "(.*?)"(?: and ends with "(.*)")?\.', view.instruction
        )
        prefix, suffix = m.group(1), m.group(2) or ""
        field = view.first("textbox")
        if field is None:
            raise OracleError("no text field")
        obs = yield type_element(field, prefix)

        def suggestions(v: View) -> list[Element]:
            return v.find(where=lambda e: e.box[1] > field.box[1] and e.role in _MENU_ROLES)

        view = yield from self.wait_until(obs, lambda v: bool(suggestions(v)), ms=100, tries=30)
        fits = [
            e for e in suggestions(view) if e.name.startswith(prefix) and e.name.endswith(suffix)
        ]
        if fits:
            view = View((yield click_element(fits[0])))
        else:  # the match is further down the menu, below the observed area
            for _ in range(60):
                value = view.first("textbox", where=lambda e: e.ref == field.ref)
                if value is not None and value.value != prefix and value.value.endswith(suffix):
                    break
                view = View((yield key("ArrowDown")))
            else:
                raise OracleError(f"no suggestion starts with {prefix!r} and ends with {suffix!r}")
            view = View((yield key("Enter")))
        value = view.first("textbox", where=lambda e: e.ref == field.ref)
        if value is None or not (value.value.startswith(prefix) and value.value.endswith(suffix)):
            raise OracleError(f"the field holds {value and value.value!r}")
        # the menu closes after a pick; wait until it no longer covers Submit
        view = yield from self.wait_until(view.obs, lambda v: not suggestions(v))
        yield click_element(_submit(view))


_MENU_ROLES = frozenset({"menuitem", "option", "listitem"})


def _partition(text: str, options: Iterable[str]) -> list[str] | None:
    """``text`` as ``", "``-joined options (in order), or None."""
    options = list(options)
    if text in options:
        return [text]
    for opt in options:
        if text.startswith(opt + ", "):
            rest = _partition(text[len(opt) + 2 :], options)
            if rest is not None:
                return [opt, *rest]
    return None


class ClickScrollListOracle(Oracle):
    """click-scroll-list: choose several options of a multi-select list with the keyboard
    (click it, Home, arrows to the first, ctrl+arrows and ctrl+Space for the others),
    then Submit (refs + keys)."""

    task = "miniwob/click-scroll-list"
    encoding = "mixed"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        text = self.parse(r"Select (.*) from the scroll list and click Submit\.", view.instruction)[
            1
        ]
        box = view.first("listbox")
        if box is None or not box.options:
            raise OracleError("no scroll list")
        options = list(box.options)
        wanted = _partition(text, options)
        if wanted is None:
            yield FAIL
            return
        indices = sorted(options.index(w) for w in wanted)
        obs = yield click_element(box)  # focuses the list (selects what is under the pointer)
        obs = yield key("Home")  # selects only the first option
        for _ in range(indices[0]):
            obs = yield key("ArrowDown")  # moves the selection
        at = indices[0]
        for i in indices[1:]:
            for _ in range(i - at):
                obs = yield key("ctrl+ArrowDown")  # moves the focus, keeps the selection
            obs = yield key("ctrl+Space")  # adds the focused option
            at = i
        view = View(obs)
        got = view.first("listbox")
        if got is None or sorted((got.value or "").split(", ")) != sorted(wanted):
            raise OracleError(f"selected {got and got.value!r}, wanted {wanted}")
        yield click_element(_submit(view))


#: env id -> oracle class (feasible tasks)
ORACLES: dict[str, type[Oracle]] = {
    cls.task: cls
    for cls in (
        ClickButtonOracle,
        ClickLinkOracle,
        ClickTabOracle,
        ClickCheckboxesOracle,
        ClickOptionOracle,
        EnterTextOracle,
        EnterPasswordOracle,
        LoginUserOracle,
        ChooseListOracle,
        ClickDialogOracle,
        ScrollText2Oracle,
        FocusTextOracle,
        ClickButtonSequenceOracle,
        ClickCollapsibleOracle,
        UseAutocompleteOracle,
        ClickScrollListOracle,
    )
}

#: the infeasible variants: the same oracles, which answer fail() when the target is missing
INFEASIBLE_ORACLES: dict[str, type[Oracle]] = {
    f"{task}-infeasible": ORACLES[task]
    for task in (
        "miniwob/click-button",
        "miniwob/click-link",
        "miniwob/click-tab",
        "miniwob/click-checkboxes",
    )
}

#: env id -> "refs" | "coords" | "mixed"
ENCODING: dict[str, str] = {task: cls.encoding for task, cls in ORACLES.items()}


SUITE = gui_oracles.OracleSuite(
    ORACLES,
    INFEASIBLE_ORACLES,
    prog="python -m env_adapters.browser.oracles",
    description="Run a scripted MiniWoB++ oracle and print per-seed results.",
    default_seeds=10,
)
#: a fresh oracle for an env id (KeyError naming the known ones)
oracle_for = SUITE.oracle_for
#: one episode of an env with the oracle of a task (an env id, or an oracle)
run_episode = SUITE.run_episode
main = SUITE.main


if __name__ == "__main__":
    sys.exit(main())
