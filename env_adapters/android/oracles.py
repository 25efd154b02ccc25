"""Scripted oracle policies for the Android suite (``android/<task>``).

An oracle sees only what any agent sees (the instruction, the text view and
the metadata's foreground package; never the device) and answers one action
per step in the shared text form (:mod:`env_adapters.gui.actions`)::

    oracle = oracle_for("android/settings-wifi")
    action = oracle.act(obs)        # e.g. 'click_element(3)', 'key("home")'

They work the way a person with a phone would: from another app they go home
(``key("home")``) and tap the app's icon; they tap list rows, switches and
buttons by their element refs, fill text boxes with ``type_element``, press
``Enter``, long-press (``right_click``) to select a file. Each step looks at
the current screen only, so an oracle recovers from a screen it did not
expect by going back. When the screen shows the goal reached, it declares
``done()``; on the infeasible tasks it declares ``fail()``.

From the shell::

    python -m env_adapters.android.oracles android/settings-wifi --seeds 5 [--address ADDR]
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from env_adapters.gui import oracles as gui_oracles
from env_adapters.gui.oracles import DeclareInfeasible, OracleError, click_element, type_element
from env_adapters.gui.textview import Element, TextViewError, read_line

LAUNCHER = "com.android.launcher3"


def parse_view(text: str) -> list[Element]:
    """The elements of an Android text view (:class:`OracleError` for a line that is not one)."""
    try:
        return [read_line(line) for line in text.splitlines() if line.strip()]
    except TextViewError as e:
        raise OracleError(str(e)) from None


class Screen:
    def __init__(self, obs: dict[str, Any]) -> None:
        self.instruction = str(obs.get("instruction", ""))
        self.elements = parse_view(str(obs.get("text", "")))
        try:
            self.meta = json.loads(str(obs.get("metadata", "") or "{}"))
        except json.JSONDecodeError:
            self.meta = {}
        self.package = self.meta.get("package")

    def find(self, name: str, role: str | tuple[str, ...] | None = None) -> Element | None:
        roles = (role,) if isinstance(role, str) else role
        return next(
            (e for e in self.elements if e.name == name and (roles is None or e.role in roles)),
            None,
        )


def _match(pattern: str, text: str) -> re.Match[str]:
    m = re.search(pattern, text)
    if m is None:
        raise OracleError(f"cannot read the instruction {text!r}")
    return m


class Oracle:
    """Base: one action per step from the current screen; :meth:`plan` per task."""

    package = ""
    app_label = ""

    def reset(self) -> None:
        self.steps = 0

    def act(self, obs: dict[str, Any]) -> str:
        self.steps += 1
        screen = Screen(obs)
        if self.steps > 40:
            raise OracleError("no progress after 40 steps")
        if self.package and screen.package != self.package:
            return self.open_app(screen)
        return self.plan(screen)

    def open_app(self, screen: Screen) -> str:
        if screen.package == LAUNCHER:
            icon = screen.find(self.app_label)
            if icon is None:
                raise OracleError(f"no {self.app_label} icon on the home screen")
            return f"click_element({icon.ref})"
        return 'key("home")'

    def plan(self, screen: Screen) -> str:
        raise NotImplementedError


class SettingOracle(Oracle):
    package, app_label = "com.android.settings", "Settings"
    PAGES = {
        "Wi-Fi": "Network & internet",
        "Airplane mode": "Network & internet",
        "Bluetooth": "Connected devices",
        "Dark theme": "Display",
        "Auto-rotate screen": "Display",
    }

    def plan(self, screen: Screen) -> str:
        m = _match(r"Turn (.+) (on|off)\.", screen.instruction)
        label, want = m.group(1), m.group(2)
        switch = screen.find(label, "switch")
        if switch is not None:
            return "done()" if switch.value == want else click_element(switch)
        row = screen.find(self.PAGES[label])
        return click_element(row) if row is not None else 'key("back")'


class ContactsAddOracle(Oracle):
    package, app_label = "com.android.contacts", "Contacts"

    def plan(self, screen: Screen) -> str:
        m = _match(r'named "(.+)" with the phone number ([\d-]+)', screen.instruction)
        name, phone = m.group(1), m.group(2)
        first, last = name.split(" ", 1)
        if screen.find(name, "text") is not None and screen.find("More options") is not None:
            return "done()"  # the saved contact's page
        if screen.find("First name", "textbox") is not None:
            for hint, want in (("First name", first), ("Last name", last), ("Phone", phone)):
                box = screen.find(hint, "textbox")
                if box is None:
                    raise OracleError(f"the editor has no {hint} field")
                if box.value != want:
                    return type_element(box, want)
            return click_element(screen.find("Save", "button") or _missing("Save"))
        create = screen.find("Create contact", "button")
        return click_element(create) if create is not None else 'key("back")'


class ContactsDeleteOracle(Oracle):
    package, app_label = "com.android.contacts", "Contacts"

    def plan(self, screen: Screen) -> str:
        target = _match(r'Delete the contact "(.+)" and', screen.instruction).group(1)
        if screen.find("Delete this contact?") is not None:
            return click_element(screen.find("Delete", "button") or _missing("Delete"))
        menu_item = screen.find("Delete", "text")
        if menu_item is not None:
            return click_element(menu_item)
        more = screen.find("More options", "button")
        if more is not None:
            on_target = screen.find(target, "text") is not None
            return click_element(more) if on_target else 'key("back")'
        if screen.find("Contacts", "text") is not None:
            row = screen.find(target, "view")
            return click_element(row) if row is not None else "done()"
        return 'key("back")'


class ClockAddOracle(Oracle):
    package, app_label = "com.android.deskclock", "Clock"

    def plan(self, screen: Screen) -> str:
        m = _match(r"Set an alarm for (\d+):(\d+) (AM|PM)\.", screen.instruction)
        hour, minute, half = m.group(1), m.group(2), m.group(3)
        if screen.find("Enter time") is not None:
            for hint, want in (("hour", hour), ("minute", minute)):
                box = screen.find(hint, "textbox") or _missing(hint)
                if box.value != want:
                    return type_element(box, want)
            radio = screen.find(half, "radio") or _missing(half)
            if radio.value != "on":
                return click_element(radio)
            return click_element(screen.find("OK", "button") or _missing("OK"))
        if screen.find("Select time") is not None:
            switch = screen.find("Switch to text input mode for the time input.")
            return click_element(switch or _missing("the text input mode button"))
        alarm = screen.find(f"{hour}:{minute} {half} alarm", "switch")
        if alarm is not None and alarm.value == "on":
            return "done()"
        tab = screen.find("Alarm", "text")
        if tab is not None and "selected" not in tab.flags:
            return click_element(tab)
        return click_element(screen.find("Add alarm", "button") or _missing("Add alarm"))


class ClockDisableOracle(Oracle):
    package, app_label = "com.android.deskclock", "Clock"

    def plan(self, screen: Screen) -> str:
        when = _match(r"Turn off the (\d+:\d+ [AP]M) alarm", screen.instruction).group(1)
        alarm = screen.find(f"{when} alarm", "switch")
        if alarm is None:
            tab = screen.find("Alarm", "text")
            return (
                click_element(tab)
                if tab is not None and "selected" not in tab.flags
                else 'key("back")'
            )
        return click_element(alarm) if alarm.value == "on" else "done()"


class FilesDeleteOracle(Oracle):
    package, app_label = "com.android.documentsui", "Files"

    def plan(self, screen: Screen) -> str:
        target = _match(r'Delete the file "(.+)" from', screen.instruction).group(1)
        if any(re.fullmatch(r"Delete \d+ items?\?", e.name) for e in screen.elements):
            return click_element(screen.find("OK", "button") or _missing("OK"))
        row = screen.find(target, "view")
        selecting = any(re.fullmatch(r"\d+ selected", e.name) for e in screen.elements)
        if selecting:
            if row is not None and "selected" in row.flags:
                return click_element(screen.find("Delete", "button") or _missing("Delete"))
            return (
                click_element(row)
                if row is not None
                else click_element(screen.find("Close") or _missing("Close"))
            )
        if screen.find("Downloads", "text") is None:
            return 'key("back")'
        if row is None:
            return "done()"
        x, y = row.center
        return f"right_click({x}, {y})"  # a long press selects


class FilesFolderOracle(Oracle):
    package, app_label = "com.android.documentsui", "Files"

    def plan(self, screen: Screen) -> str:
        folder = _match(r'Create a folder named "(.+)" in', screen.instruction).group(1)
        box = screen.find("Folder name", "textbox")
        if box is not None:
            return (
                type_element(box, folder)
                if box.value != folder
                else click_element(screen.find("OK", "button") or _missing("OK"))
            )
        item = screen.find("New folder", "text")
        if item is not None:
            return click_element(item)
        if screen.find("Downloads", "text") is None:
            return 'key("back")'
        if screen.find(folder, "view") is not None:
            return "done()"
        return click_element(screen.find("More options", "button") or _missing("More options"))


class BrowserOracle(Oracle):
    package, app_label = "org.chromium.webview_shell", "Browser"

    def plan(self, screen: Screen) -> str:
        url = _match(r"Open the page (\S+) in the Browser", screen.instruction).group(1)
        field = screen.find("Enter URL", "textbox") or _missing("the address field")
        page = next((e for e in screen.elements if e.role == "webview"), None)
        loaded = page is not None and page.name not in ("", "Web page not available")
        if field.value == url and loaded and "focused" not in field.flags:
            return "done()"
        if field.value != url:
            return type_element(field, url)
        return 'key("Enter")'


def _missing(what: str) -> Any:
    raise OracleError(f"the screen has no {what}")


FEASIBLE_ORACLES = {
    "android/settings-wifi": SettingOracle,
    "android/settings-bluetooth": SettingOracle,
    "android/settings-airplane-mode": SettingOracle,
    "android/settings-dark-theme": SettingOracle,
    "android/settings-auto-rotate": SettingOracle,
    "android/contacts-add": ContactsAddOracle,
    "android/contacts-delete": ContactsDeleteOracle,
    "android/clock-add-alarm": ClockAddOracle,
    "android/clock-disable-alarm": ClockDisableOracle,
    "android/files-delete": FilesDeleteOracle,
    "android/files-create-folder": FilesFolderOracle,
    "android/browser-open-page": BrowserOracle,
}
INFEASIBLE_ORACLES = {
    "android/settings-5g-infeasible": DeclareInfeasible,
    "android/contacts-sync-infeasible": DeclareInfeasible,
}
SUITE = gui_oracles.OracleSuite(
    FEASIBLE_ORACLES,
    INFEASIBLE_ORACLES,
    prog="python -m env_adapters.android.oracles",
    description="Play android/<task> episodes with the scripted oracle.",
    default_seeds=3,
)
oracle_for = SUITE.oracle_for
run_episode = SUITE.run_episode

if __name__ == "__main__":
    sys.exit(SUITE.main())
