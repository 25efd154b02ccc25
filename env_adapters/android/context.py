"""What Android tasks see: the device's real state over adb, and a few setup helpers.

A :class:`TaskContext` wraps the sandbox's :class:`~env_adapters.android.device.Device`.
Checkers read state the way a test harness on a phone would: ``settings get``,
``content query`` on the content providers (contacts, alarms), files under
``/sdcard`` (``ls``, ``cat``), the foreground activity (``dumpsys``) and, for
what only the screen shows (the browser's address), the UI hierarchy.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from env_adapters.android import apps as apps_mod
from env_adapters.android.device import Device
from env_adapters.android.hierarchy import UiView, extract_xml, parse
from env_adapters.gui.tasks import CheckerError

UI_DUMP_PATH = "/sdcard/window_dump.xml"


def dump_ui_command(path: str = UI_DUMP_PATH) -> str:
    return f"uiautomator dump {path} >/dev/null 2>&1; cat {path}; rm -f {path}"


class TaskContext:
    """Device state for task setup and checkers (see module doc)."""

    def __init__(self, device: Device) -> None:
        self.device = device

    def shell(self, command: str) -> str:
        return self.device.shell(command)

    # settings ---------------------------------------------------------------

    def setting(self, namespace: str, key: str) -> str | None:
        """``settings get NAMESPACE KEY`` (None when unset)."""
        out = self.shell(f"settings get {namespace} {shlex.quote(key)}").strip()
        return None if out in ("", "null") else out

    def put_setting(self, namespace: str, key: str, value: str | int) -> None:
        self.shell(f"settings put {namespace} {shlex.quote(key)} {shlex.quote(str(value))}")

    # content providers ------------------------------------------------------

    def query(
        self, uri: str, projection: list[str], where: str | None = None
    ) -> list[dict[str, str]]:
        """Rows of ``content query`` (each a dict of the projected columns)."""
        cmd = f"content query --uri {shlex.quote(uri)} --projection {':'.join(projection)}"
        if where:
            cmd += f" --where {shlex.quote(where)}"
        out = self.shell(cmd)
        if out.strip() == "No result found.":
            return []
        rows = []
        cols = "|".join(re.escape(c) for c in projection)
        for line in out.splitlines():
            if not line.startswith("Row: "):
                if line.strip():
                    raise CheckerError(f"content query {uri}: {line.strip()[:200]}")
                continue
            body = line.split(" ", 2)[2] if line.count(" ") >= 2 else ""
            marks = list(re.finditer(rf"(?:^|, )({cols})=", body))
            row = {}
            for i, m in enumerate(marks):
                end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
                value = body[m.end() : end]
                row[m.group(1)] = "" if value == "NULL" else value
            rows.append(row)
        return rows

    def insert(self, uri: str, values: dict[str, Any]) -> None:
        """``content insert`` with typed bindings (None -> n, int -> i, bool -> b, else s)."""
        binds = []
        for key, value in values.items():
            if value is None:
                kind, text = "n", ""
            elif isinstance(value, bool):
                kind, text = "b", str(value).lower()
            else:
                kind, text = ("i" if isinstance(value, int) else "s"), str(value)
            binds.append(f"--bind {shlex.quote(f'{key}:{kind}:{text}')}")
        out = self.shell(f"content insert --uri {shlex.quote(uri)} {' '.join(binds)}")
        if out.strip():
            raise CheckerError(f"content insert {uri}: {out.strip()[:200]}")

    # files ------------------------------------------------------------------

    def ls(self, directory: str) -> list[str] | None:
        """Names in ``directory`` (None if it does not exist)."""
        q = shlex.quote(directory)
        out = self.shell(f"test -d {q} && ls -1 {q} || echo __missing__")
        if out.strip() == "__missing__":
            return None
        return [ln for ln in out.splitlines() if ln.strip()]

    def is_dir(self, path: str) -> bool:
        q = shlex.quote(path)
        return self.shell(f"test -d {q} && echo yes || echo no").strip() == "yes"

    def read(self, path: str) -> str | None:
        """The text of a file (None if it is not there)."""
        q = shlex.quote(path)
        if self.shell(f"test -f {q} && echo yes || echo no").strip() != "yes":
            return None
        return self.shell(f"cat {q}")

    def write(self, path: str, text: str) -> None:
        """Create ``path`` (and its directory) holding ``text`` (printable, no quotes needed)."""
        parent = path.rsplit("/", 1)[0]
        self.shell(
            f"mkdir -p {shlex.quote(parent)} && printf %s {shlex.quote(text)} > {shlex.quote(path)}"
        )

    # apps -------------------------------------------------------------------

    def launch(self, app: str) -> None:
        """Start a stock app (``am start -W -n``) by its key in :data:`apps.APPS`."""
        component = apps_mod.APPS[app].component
        out = self.shell(f"am start -W -n {component}")
        if "Error" in out:
            raise CheckerError(f"cannot start {component}: {out.strip()[:200]}")

    def launch_package(self, package: str) -> None:
        """Start an app by package (its launcher activity, through ``monkey``)."""
        out = self.shell(f"monkey -p {shlex.quote(package)} -c android.intent.category.LAUNCHER 1")
        if "Events injected: 1" not in out:
            raise CheckerError(f"cannot start {package}: {out.strip()[-200:]}")

    def home(self) -> None:
        self.shell("input keyevent 3")

    def foreground(self) -> tuple[str, str] | None:
        return apps_mod.parse_foreground(self.shell("dumpsys activity activities"))

    def ui(self) -> UiView:
        return parse(extract_xml(self.shell(dump_ui_command())))
