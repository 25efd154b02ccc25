"""The Android task suite: ``android/<task>`` env ids on the stock apps.

Every task is a :class:`~env_adapters.gui.TaskSpec` (``kind="android"``;
``setup["apps"]`` names the apps whose data the app-data reset clears,
``evaluator["name"]`` its checker) plus its logic, an
:class:`~env_adapters.android.env.AndroidTask`: ``setup`` puts the device in
the episode's start state through adb (settings through ``svc``/``cmd``/
``settings put``, contacts and alarms through ``content insert``, files
through the shell), starts the app (or leaves the home screen) and returns the
instruction (seeded: the same seed gives the same episode); ``check`` reads
real device state when the agent declares ``done()``: ``settings get``,
``content query`` on the contacts provider and DeskClock's alarms provider,
``ls`` of ``/sdcard/Download``, the foreground activity and, for the
browser's address, the UI hierarchy.

DeskClock's provider is not exported on AOSP images: seeding and reading
alarms needs adbd running as root (the emulator image runs ``adb root``; any
``userdebug``/``eng`` build can).

Infeasible tasks ask for something the device does not offer (no 5G radio,
no Google account); the right answer is ``fail()``.
"""

from __future__ import annotations

import shlex
from typing import Any

import numpy as np

from env_adapters.android.context import TaskContext
from env_adapters.android.env import AndroidEnv, AndroidTask
from env_adapters.gui.tasks import CheckedSuite, SuiteEntry, TaskSpec

FIRST = ("Ada", "Bruno", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas",
         "Keiko", "Liam", "Maya", "Nils", "Olga", "Priya")  # fmt: skip
LAST = ("Quartz", "Rivera", "Sato", "Tanaka", "Ulrich", "Varga", "Weber", "Xu", "Young", "Zeller",
        "Moreau", "Novak", "Okafor", "Petrov")  # fmt: skip
WORDS = ("amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
         "juniper", "kestrel", "lagoon", "meadow", "nectar", "onyx", "quartz", "raven")  # fmt: skip
CONTACTS = "content://com.android.contacts"
RAW_CONTACTS = f"{CONTACTS}/raw_contacts"
DATA = f"{CONTACTS}/data"
NAME_MIME = "vnd.android.cursor.item/name"
PHONE_MIME = "vnd.android.cursor.item/phone_v2"
ALARMS = "content://com.android.deskclock/alarms"
DOWNLOAD = "/sdcard/Download"


def pick(rng: np.random.Generator, items: tuple[str, ...] | list[str], n: int = 1) -> list[str]:
    return [str(x) for x in rng.choice(list(items), size=n, replace=False)]


def result(ok: bool, **info: Any) -> tuple[float, dict[str, Any]]:
    return (1.0 if ok else 0.0), info


def time_text(hour: int, minute: int) -> str:
    """``6:45 AM`` for 24-hour ``hour``."""
    return f"{hour % 12 or 12}:{minute:02d} {'AM' if hour < 12 else 'PM'}"


def digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


# ---------------------------------------------------------------- helpers over adb


def add_contact(ctx: TaskContext, name: str, phone: str) -> None:
    """A contact with a name and a mobile number (raw contact + two data rows)."""
    ctx.insert(RAW_CONTACTS, {"account_type": None, "account_name": None})
    ids = [int(r["_id"]) for r in ctx.query(RAW_CONTACTS, ["_id"]) if r.get("_id", "").isdigit()]
    raw = max(ids)
    ctx.insert(DATA, {"raw_contact_id": raw, "mimetype": NAME_MIME, "data1": name})
    ctx.insert(DATA, {"raw_contact_id": raw, "mimetype": PHONE_MIME, "data1": phone})


def contacts(ctx: TaskContext) -> dict[str, list[str]]:
    """Contact name -> its phone numbers, from the contacts provider's data table."""
    rows = ctx.query(DATA, ["raw_contact_id", "mimetype", "data1"])
    names = {r["raw_contact_id"]: r["data1"] for r in rows if r.get("mimetype") == NAME_MIME}
    found: dict[str, list[str]] = {n: [] for n in names.values()}
    for r in rows:
        if r.get("mimetype") == PHONE_MIME and r.get("raw_contact_id") in names:
            found[names[r["raw_contact_id"]]].append(r["data1"])
    return found


def alarms(ctx: TaskContext) -> list[tuple[int, int, bool]]:
    """(hour, minutes, enabled) of every alarm, from DeskClock's provider."""
    rows = ctx.query(ALARMS, ["_id", "hour", "minutes", "enabled"])
    return sorted((int(r["hour"]), int(r["minutes"]), r["enabled"] == "1") for r in rows)


# ---------------------------------------------------------------- settings


class SettingToggle(AndroidTask):
    """Turn a setting on or off (the start state is the opposite); checked with ``settings get``."""

    label = ""
    namespace, key, on_value, off_value = "global", "", "1", "0"
    start = "settings"

    def apply(self, ctx: TaskContext, on: bool) -> None:
        ctx.put_setting(self.namespace, self.key, self.on_value if on else self.off_value)

    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.target = bool(rng.integers(0, 2))
        if self.key != "airplane_mode_on":
            ctx.shell("cmd connectivity airplane-mode disable")
        self.apply(ctx, not self.target)
        if self.start == "home":
            ctx.home()
        else:
            ctx.launch(self.start)
        return f"Turn {self.label} {'on' if self.target else 'off'}."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        value = ctx.setting(self.namespace, self.key)
        want = self.on_value if self.target else self.off_value
        return result(value == want, value=value, want=want)


class WifiToggle(SettingToggle):
    label, key = "Wi-Fi", "wifi_on"

    def apply(self, ctx: TaskContext, on: bool) -> None:
        ctx.shell(f"svc wifi {'enable' if on else 'disable'}")


class BluetoothToggle(SettingToggle):
    label, key = "Bluetooth", "bluetooth_on"

    def apply(self, ctx: TaskContext, on: bool) -> None:
        ctx.shell(f"svc bluetooth {'enable' if on else 'disable'}")


class AirplaneToggle(SettingToggle):
    label, key = "Airplane mode", "airplane_mode_on"
    start = "home"

    def apply(self, ctx: TaskContext, on: bool) -> None:
        ctx.shell(f"cmd connectivity airplane-mode {'enable' if on else 'disable'}")


class DarkTheme(SettingToggle):
    label, namespace, key, on_value, off_value = "Dark theme", "secure", "ui_night_mode", "2", "1"
    start = "home"

    def apply(self, ctx: TaskContext, on: bool) -> None:
        ctx.shell(f"cmd uimode night {'yes' if on else 'no'}")


class AutoRotate(SettingToggle):
    label, namespace, key = "Auto-rotate screen", "system", "accelerometer_rotation"


# ---------------------------------------------------------------- contacts


def _people(rng: np.random.Generator, n: int) -> list[tuple[str, str]]:
    firsts, lasts = pick(rng, FIRST, n), pick(rng, LAST, n)
    return [
        (f"{f} {lst}", f"555-01{int(rng.integers(10, 99))}")
        for f, lst in zip(firsts, lasts, strict=True)
    ]


class ContactsAdd(AndroidTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        people = _people(rng, 3)
        self.existing, (self.name, self.phone) = people[:2], people[2]
        for name, phone in self.existing:
            add_contact(ctx, name, phone)
        ctx.launch("contacts")
        return f'Add a contact named "{self.name}" with the phone number {self.phone}.'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        found = contacts(ctx)
        ok = digits(self.phone) in [digits(p) for p in found.get(self.name, [])] and all(
            n in found for n, _ in self.existing
        )
        return result(ok, contacts=found)


class ContactsDelete(AndroidTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.people = _people(rng, 3)
        self.target = self.people[int(rng.integers(0, 3))][0]
        for name, phone in self.people:
            add_contact(ctx, name, phone)
        ctx.launch("contacts")
        return f'Delete the contact "{self.target}" and keep the others.'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        names = sorted(contacts(ctx))
        want = sorted(n for n, _ in self.people if n != self.target)
        return result(names == want, contacts=names)


# ---------------------------------------------------------------- clock


def _times(rng: np.random.Generator, n: int) -> list[tuple[int, int]]:
    slots = rng.choice(24 * 12, size=n, replace=False)
    return [(int(s) // 12, int(s) % 12 * 5) for s in slots]


class ClockAddAlarm(AndroidTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        (h0, m0), (self.hour, self.minute) = _times(rng, 2)
        self.existing = (h0, m0)
        ctx.insert(ALARMS, {"hour": h0, "minutes": m0, "enabled": 1, "label": "", "vibrate": 1})
        ctx.launch("clock")
        return f"Set an alarm for {time_text(self.hour, self.minute)}."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        found = alarms(ctx)
        ok = (self.hour, self.minute, True) in found and any(
            (h, m) == self.existing for h, m, _ in found
        )
        return result(ok, alarms=[time_text(h, m) + ("" if on else " (off)") for h, m, on in found])


class ClockDisableAlarm(AndroidTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.times = _times(rng, 3)
        self.target = self.times[int(rng.integers(0, 3))]
        for h, m in self.times:
            ctx.insert(ALARMS, {"hour": h, "minutes": m, "enabled": 1, "label": "", "vibrate": 1})
        ctx.launch("clock")
        return (
            f"Turn off the {time_text(*self.target)} alarm and leave the other alarms on "
            "(do not delete any)."
        )

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        found = alarms(ctx)
        want = sorted((h, m, (h, m) != self.target) for h, m in self.times)
        return result(found == want, alarms=found)


# ---------------------------------------------------------------- files


def _seed_files(ctx: TaskContext, rng: np.random.Generator, n: int) -> list[str]:
    exts = (".txt", ".pdf", ".csv", ".jpg")
    names = [
        f"{w}-{int(rng.integers(10, 99))}{exts[i % 4]}" for i, w in enumerate(pick(rng, WORDS, n))
    ]
    commands = [f"mkdir -p {DOWNLOAD}"] + [
        f"printf %s {shlex.quote('farm file ' + n)} > {shlex.quote(f'{DOWNLOAD}/{n}')}"
        for n in names
    ]
    ctx.shell(" && ".join(commands))
    return names


class FilesDelete(AndroidTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.names = _seed_files(ctx, rng, 4)
        self.target = self.names[int(rng.integers(0, 4))]
        ctx.launch("files")
        return f'Delete the file "{self.target}" from Downloads with the Files app.'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        left = sorted(ctx.ls(DOWNLOAD) or [])
        return result(left == sorted(n for n in self.names if n != self.target), left=left)


class FilesCreateFolder(AndroidTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.names = _seed_files(ctx, rng, 2)
        self.folder = "-".join(pick(rng, WORDS, 2))
        ctx.launch_package("com.android.documentsui")  # by package, as `monkey -p` does
        return f'Create a folder named "{self.folder}" in Downloads with the Files app.'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        ok = ctx.is_dir(f"{DOWNLOAD}/{self.folder}")
        return result(ok, listing=ctx.ls(DOWNLOAD))


# ---------------------------------------------------------------- browser


class BrowserOpenPage(AndroidTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        word = pick(rng, WORDS)[0]
        self.title = f"Notes about {word}"
        path = f"{DOWNLOAD}/{word}.html"
        ctx.write(
            path,
            f"<html><head><title>{self.title}</title></head><body><h1>{self.title}</h1>"
            f"<p>The {word} page is local.</p></body></html>",
        )
        self.url = f"file://{path}"
        ctx.home()
        return f"Open the page {self.url} in the Browser app."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        fg = ctx.foreground()
        if fg is None or fg[0] != "org.chromium.webview_shell":
            return result(False, foreground=fg)
        view = ctx.ui()
        url = next((e.value for e in view.elements if e.resource_id.endswith("url_field")), None)
        page = next((e.name for e in view.elements if e.role == "webview"), None)
        return result(url == self.url and page == self.title, url=url, page=page)


# ---------------------------------------------------------------- infeasible


class Settings5G(AndroidTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        ctx.launch("settings")
        return "Turn on 5G standalone mode in the mobile network settings."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        return 0.0, {}


class ContactsSync(AndroidTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        (self.name, phone), *_ = _people(rng, 1)
        add_contact(ctx, self.name, phone)
        ctx.launch("contacts")
        return f'Back up the contact "{self.name}" to your Google account.'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        return 0.0, {}


# ---------------------------------------------------------------- the suite


Entry = SuiteEntry[AndroidTask]


SUITE: dict[str, Entry] = {
    "settings-wifi": Entry(WifiToggle, ("settings",), "settings", "turn Wi-Fi on or off"),
    "settings-bluetooth": Entry(
        BluetoothToggle, ("settings",), "settings", "turn Bluetooth on or off"
    ),
    "settings-airplane-mode": Entry(
        AirplaneToggle, ("settings",), "settings", "turn airplane mode on or off (from home)"
    ),
    "settings-dark-theme": Entry(
        DarkTheme, ("settings",), "settings", "turn the dark theme on or off (from home)"
    ),
    "settings-auto-rotate": Entry(
        AutoRotate, ("settings",), "settings", "turn auto-rotate on or off"
    ),
    "contacts-add": Entry(
        ContactsAdd, ("contacts",), "contacts-provider", "add a contact with a phone number"
    ),
    "contacts-delete": Entry(
        ContactsDelete, ("contacts",), "contacts-provider", "delete one of three contacts"
    ),
    "clock-add-alarm": Entry(
        ClockAddAlarm, ("clock",), "alarms-provider", "set an alarm (time picker text mode)"
    ),
    "clock-disable-alarm": Entry(
        ClockDisableAlarm, ("clock",), "alarms-provider", "turn off one of three alarms"
    ),
    "files-delete": Entry(
        FilesDelete, ("files",), "files", "delete a file in Downloads (long press, delete)"
    ),
    "files-create-folder": Entry(
        FilesCreateFolder, ("files",), "files", "create a folder in Downloads"
    ),
    "browser-open-page": Entry(
        BrowserOpenPage, ("browser", "files"), "ui-hierarchy", "open a local page in the browser"
    ),
    "settings-5g-infeasible": Entry(
        Settings5G, ("settings",), "none", "infeasible: 5G standalone (no such radio)",
        max_steps=10, feasible=False,
    ),
    "contacts-sync-infeasible": Entry(
        ContactsSync, ("contacts",), "none", "infeasible: sync to a Google account (none)",
        max_steps=10, feasible=False,
    ),
}  # fmt: skip

TASKS = CheckedSuite("android", SUITE, max_steps=20)
SPECS: dict[str, TaskSpec] = TASKS.specs
FEASIBLE: tuple[str, ...] = TASKS.feasible
INFEASIBLE: tuple[str, ...] = TASKS.infeasible
task_logic = TASKS.logic


def make_env(task: str, **kwargs: Any) -> AndroidEnv:
    """``android/<task>`` (or ``<task>``) as an :class:`AndroidEnv`."""
    return AndroidEnv(TASKS.spec(task), **kwargs)


TASKS.register(make_env)
