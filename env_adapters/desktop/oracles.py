"""Scripted oracle policies for the desktop suite (``desktop/<task>``).

An oracle sees only what any agent sees (the instruction and the text view:
windows and, for GTK apps, their widgets; never the sandbox) and answers one
action per step in the shared text form (:mod:`env_adapters.gui.actions`)::

    oracle = oracle_for("desktop/calc-add")
    action = oracle.act(obs)        # e.g. 'click_element(1)', 'type("12+30=")'

They work the way a person with a keyboard would: focus a window
(``click_element`` on its ref, or a pixel ``click`` into it), type commands
and shortcuts (``ctrl+s``, ``alt+F4``), and watch window titles to know when
something finished; the calculator oracles press galculator's buttons by
their element refs (``click_element`` on the widget lines) and fall back to
the keyboard when the view has no widgets; a terminal command ends by setting the window title to a
marker, a save is done when the editor's title loses its ``*``. When the
policy returns, the oracle declares ``done()``; on the infeasible tasks it
declares ``fail()``.

From the shell::

    python -m env_adapters.desktop.oracles desktop/calc-add --seeds 5 [--address ADDR]
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from env_adapters.gui import oracles as gui_oracles
from env_adapters.gui.oracles import (
    DeclareInfeasible,
    OracleError,
    Policy,
    PolicyOracle,
    click,
    click_element,
    key,
    type_text,
    wait,
)
from env_adapters.gui.textview import Element, TextViewError, read_line

# ---------------------------------------------------------------- the text view

#: the flags of a window line (its widget lines may have any)
WINDOW_FLAGS = ("focused", "minimized")


@dataclass(frozen=True)
class Win:
    """A window line of the desktop text view, with the widget lines under it."""

    ref: int
    title: str
    wm_class: str
    focused: bool
    minimized: bool
    box: tuple[int, int, int, int]
    widgets: tuple[Element, ...] = ()

    @property
    def center(self) -> tuple[int, int]:
        x, y, w, h = self.box
        return x + w // 2, y + h // 2

    def widget(self, role: str | tuple[str, ...], name: str | None = None) -> Element | None:
        roles = (role,) if isinstance(role, str) else role
        return next(
            (w for w in self.widgets if w.role in roles and (name is None or w.name == name)),
            None,
        )


def parse_windows(text: str) -> list[Win]:
    """The window lines of a desktop text view, each with its widget lines."""
    found: list[Win] = []
    widgets: list[Element] = []

    def close() -> None:
        if found and widgets:
            found[-1] = replace(found[-1], widgets=tuple(widgets))
        widgets.clear()

    for line in text.splitlines():
        if not line.strip():
            continue
        widget = line[0].isspace()
        try:
            el = read_line(line, flags=None if widget else WINDOW_FLAGS)
        except TextViewError as e:
            raise OracleError(f"not a {'widget' if widget else 'window'} line: {e}") from None
        if widget:
            if not found:
                raise OracleError(f"a widget line before any window: {line!r}")
            widgets.append(el)
            continue
        if el.role != "window":
            raise OracleError(f"not a window line: {line!r}")
        close()
        found.append(
            Win(
                ref=el.ref,
                title=el.name,
                wm_class=el.cls,
                focused=el.focused,
                minimized="minimized" in el.flags,
                box=el.box,
            )
        )
    close()
    return found


class View:
    def __init__(self, obs: dict[str, Any]) -> None:
        self.obs = obs
        self.instruction = str(obs.get("instruction", ""))
        self.windows = parse_windows(str(obs.get("text", "")))

    def find(self, wm_class: str | None = None, title: Callable[[str], bool] | None = None):
        return [
            w
            for w in self.windows
            if (wm_class is None or w.wm_class == wm_class) and (title is None or title(w.title))
        ]

    def first(self, wm_class: str | None = None, title: Callable[[str], bool] | None = None):
        found = self.find(wm_class, title)
        if not found:
            raise OracleError(f"no {wm_class or ''} window in:\n{self.obs.get('text', '')}")
        return found[0]


# ---------------------------------------------------------------- oracles


class Oracle(PolicyOracle[View]):
    """Base of the desktop policies (:class:`~env_adapters.gui.oracles.PolicyOracle`)."""

    wait_tries = 50

    def read(self, obs: dict[str, Any]) -> View:
        return View(obs)

    def not_ready(self, view: View, ms: int) -> str:
        return f"not ready after {ms} ms; windows:\n{view.obs.get('text')}"


# ---------------------------------------------------------------- terminal


def q(path: str) -> str:
    return shlex.quote(path)


#: the terminal tasks of one command: the instruction's pattern, and the command
#: (``{0}``, ``{1}``: the pattern's groups, shell-quoted)
TERMINAL_COMMANDS: dict[str, tuple[str, str]] = {
    "desktop/terminal-create-file": (
        r'Create the file (\S+) containing the line "(.*)"\.',
        "mkdir -p $(dirname {0}) && echo {1} > {0}",
    ),
    "desktop/terminal-make-dir": (
        r"Create the directory (\S+) \(with its parents\)\.",
        "mkdir -p {0}",
    ),
    "desktop/terminal-rename-file": (r"Rename the file (\S+) to (\S+)\.", "mv {0} {1}"),
    "desktop/terminal-delete-tmp": (
        r"Delete every \.tmp file in (\S+) and keep all other files there\.",
        "rm -f {0}/*.tmp",
    ),
    "desktop/terminal-count-lines": (
        r"Write the number of lines of (\S+) \(just the number\) into the file (\S+)\.",
        "wc -l < {0} > {1}",
    ),
    "desktop/terminal-chmod": (
        r"Make the script (\S+) executable by its owner\.",
        "chmod u+x {0}",
    ),
    # only this desktop's process: its environment carries this desktop's FARM_DESKTOP
    "desktop/terminal-kill-process": (
        r'Stop the process "(sleep \d+)" that runs on this desktop\.',
        "for p in $(pgrep -x -f {0}); do "
        'grep -qz "^FARM_DESKTOP=$FARM_DESKTOP$" /proc/$p/environ && kill $p; done',
    ),
}


class TerminalOracle(Oracle):
    """Types the shell command of a :data:`TERMINAL_COMMANDS` task into the terminal,
    ending it by setting the title to a marker, and waits until the title shows the marker."""

    def __init__(self, task: str) -> None:
        self.task = task
        self.pattern, self.command = TERMINAL_COMMANDS[task]
        super().__init__()

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        m = self.parse(self.pattern, view.instruction)
        term = view.first("xterm")
        obs = yield click_element(term)
        marker = "oracle-finished"
        command = self.command.format(*map(q, m.groups()))
        obs = yield type_text(f"{command}; printf '\\033]0;%s\\007' {marker}\n")
        yield from self.wait_until(obs, lambda v: bool(v.find("xterm", lambda t: t == marker)))


class TerminalSetTitleOracle(Oracle):
    task = "desktop/terminal-set-title"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        title = self.parse(r'Set the title of the terminal window to "(.*)"\.', view.instruction)[1]
        obs = yield click_element(view.first("xterm"))
        obs = yield type_text(f"printf '\\033]0;%s\\007' {q(title)}\n")
        yield from self.wait_until(obs, lambda v: bool(v.find("xterm", lambda t: t == title)))


# ---------------------------------------------------------------- editor


def saved(path_or_name: str) -> Callable[[View], bool]:
    """The editor's title names the file and has no unsaved-changes mark."""
    return lambda v: bool(v.find("mousepad", lambda t: path_or_name in t and not t.startswith("*")))


class EditorWriteNewOracle(Oracle):
    task = "desktop/editor-write-new"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        m = self.parse(r'In the text editor, write "(.*)" and save it as (\S+)\.', view.instruction)
        text, path = m.group(1), m.group(2)
        obs = yield click_element(view.first("mousepad"))
        obs = yield type_text(text)
        obs = yield key("ctrl+s")
        # the dialog takes the keyboard once it is the active window
        obs = yield from self.wait_until(
            obs, lambda v: any(w.focused for w in v.find(title=lambda t: t == "Save As"))
        )
        # the file chooser loads the folder and sets up completion first; typed keys get lost
        obs = yield wait(500)
        obs = yield key("ctrl+a")  # the name field may hold a suggested name
        obs = yield type_text(path)
        obs = yield wait(300)  # completion of the typed path settles
        obs = yield key("Enter")
        yield from self.wait_until(obs, saved(path.rsplit("/", 1)[1]))


class EditorAppendLineOracle(Oracle):
    task = "desktop/editor-append-line"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        m = self.parse(
            r'Add the line "(.*)" at the end of (\S+) in the text editor and save it\.',
            view.instruction,
        )
        obs = yield click_element(view.first("mousepad"))
        obs = yield key("ctrl+End")  # the file ends with a newline: the last line is empty
        obs = yield type_text(m.group(1))
        obs = yield key("ctrl+s")
        yield from self.wait_until(obs, saved(m.group(2).rsplit("/", 1)[1]))


class EditorCopyLineOracle(Oracle):
    task = "desktop/editor-copy-line"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        pattern = r"Copy line (\d+) of (\S+) \(open in the text editor\) to the clipboard\."
        n = int(self.parse(pattern, view.instruction)[1])
        yield click_element(view.first("mousepad"))
        yield key("ctrl+Home")
        for _ in range(n - 1):
            yield key("Down")
        yield key("Home")
        yield key("shift+End")
        yield key("ctrl+c")


class EditorLineNumbersOracle(Oracle):
    task = "desktop/editor-line-numbers"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        pattern = r"Turn on line numbers in the text editor \(a setting of its View menu\)\."
        self.parse(pattern, view.instruction)
        yield click_element(view.first("mousepad"))
        yield key("alt+v")  # View menu: Select Font..., Color Scheme, Line Numbers, ...
        yield key("Down")
        yield key("Down")
        yield key("Enter")


# ---------------------------------------------------------------- calculator


BUTTONS = ("toggle_button", "push_button")


class CalculateOracle(Oracle):
    """Presses galculator's buttons by element ref (the keyboard when the text view has
    no widgets), ``=``, waits for the display to change, copies the display."""

    task = "desktop/calc-add"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        expr = self.parse(
            r"Compute (.*) with the calculator and copy the result to the clipboard\.",
            view.instruction,
        )[1]
        keys = expr.replace(" ", "") + "="
        calc = view.first("galculator")
        if calc.widget(BUTTONS) is None:  # no AT-SPI view: type
            if not calc.focused:  # its title bar: the middle of the window is a button
                yield click(calc.center[0], max(0, calc.box[1] - 8))
            yield type_text(keys)
        else:
            display = calc.widget("text")
            before = display.value if display is not None else None
            for char in keys:
                button = view.first("galculator").widget(BUTTONS, char)
                if button is None:
                    raise OracleError(f"galculator has no button {char!r}")
                view = View((yield click_element(button)))
            if before is not None:  # the result is on the display
                yield from self.wait_until(
                    view.obs,
                    lambda v: (
                        (d := v.first("galculator").widget("text")) is not None
                        and d.value not in (None, before)
                    ),
                    ms=50,
                    tries=20,
                )
        yield key("ctrl+c")


class CalculateExpressionOracle(CalculateOracle):
    task = "desktop/calc-expression"


class CalculateDivisionOracle(CalculateOracle):
    task = "desktop/calc-divide"


# ---------------------------------------------------------------- windows


class WindowCloseOracle(Oracle):
    task = "desktop/window-close"

    def policy(self, obs: dict[str, Any]) -> Policy:
        view = View(obs)
        title = self.parse(
            r'Close the terminal window titled "(.*)" and leave the others open\.',
            view.instruction,
        )[1]
        obs = yield click_element(view.first("xterm", lambda t: t == title))
        obs = yield key("alt+F4")  # openbox: close the active window
        yield from self.wait_until(obs, lambda v: not v.find("xterm", lambda t: t == title))


ORACLES: dict[str, Callable[[], Oracle]] = {
    **{task: partial(TerminalOracle, task) for task in TERMINAL_COMMANDS},
    **{
        cls.task: cls
        for cls in (
            TerminalSetTitleOracle,
            EditorWriteNewOracle,
            EditorAppendLineOracle,
            EditorCopyLineOracle,
            EditorLineNumbersOracle,
            CalculateOracle,
            CalculateExpressionOracle,
            CalculateDivisionOracle,
            WindowCloseOracle,
        )
    },
}
#: the infeasible tasks: the desktop has no network and no plotting
INFEASIBLE_ORACLES: dict[str, type[DeclareInfeasible]] = {
    "desktop/terminal-install-infeasible": DeclareInfeasible,
    "desktop/calc-plot-infeasible": DeclareInfeasible,
}


SUITE = gui_oracles.OracleSuite(
    ORACLES,
    INFEASIBLE_ORACLES,
    prog="python -m env_adapters.desktop.oracles",
    description="Run a scripted desktop oracle and print per-seed results.",
    default_seeds=5,
)
#: a fresh oracle for an env id (KeyError naming the known ones)
oracle_for = SUITE.oracle_for
#: one episode of an env with the oracle of a task (an env id, or an oracle)
run_episode = SUITE.run_episode
main = SUITE.main


if __name__ == "__main__":
    sys.exit(main())
