"""The stock apps of an Android image (AOSP ``google_apis`` x86_64), the foreground activity.

* :data:`APPS`: each app's package, launch activity, the packages whose data
  holds its state and its directories (the app-data reset clears both:
  ``pm clear``, ``rm -rf DIR/*``);
* :func:`foreground`: the resumed activity, from ``dumpsys activity activities``
  (``mResumedActivity``, or ``topResumedActivity``/``ResumedActivity`` on
  Android 12+), else ``mCurrentFocus`` of ``dumpsys window``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class App:
    label: str
    package: str
    activity: str  # relative to the package when it starts with "."
    data: tuple[str, ...] = ()  # packages whose data is the app's state
    dirs: tuple[str, ...] = ()  # directories whose contents are the app's state

    @property
    def component(self) -> str:
        return f"{self.package}/{self.activity}"


APPS: dict[str, App] = {
    "home": App("Home", "com.android.launcher3", ".uioverride.QuickstepLauncher"),
    "settings": App("Settings", "com.android.settings", ".Settings"),
    "contacts": App(
        "Contacts",
        "com.android.contacts",
        ".activities.PeopleActivity",
        ("com.android.contacts", "com.android.providers.contacts"),
    ),
    "clock": App("Clock", "com.android.deskclock", ".DeskClock", ("com.android.deskclock",)),
    "files": App(
        "Files",
        "com.android.documentsui",
        ".files.FilesActivity",
        ("com.android.documentsui",),
        ("/sdcard/Download",),
    ),
    "browser": App(
        "Browser",
        "org.chromium.webview_shell",
        ".WebViewBrowserActivity",
        ("org.chromium.webview_shell",),
    ),
}

_RESUMED = re.compile(
    r"(?:mResumedActivity|topResumedActivity|ResumedActivity)[:=]\s*"
    r"ActivityRecord\{\S+ u\d+ ([\w.]+)/([\w.$]+)"
)
_FOCUS = re.compile(r"mCurrentFocus=Window\{\S+ u\d+ ([\w.]+)/([\w.$]+)")


def parse_foreground(activities: str, window: str = "") -> tuple[str, str] | None:
    """(package, activity) of the resumed activity, from dumpsys output; None if none."""
    m = _RESUMED.search(activities) or _FOCUS.search(window)
    if m is None:
        return None
    package, activity = m.group(1), m.group(2)
    if activity.startswith(package + "."):
        activity = activity[len(package) :]
    return package, activity


def by_package(package: str) -> App | None:
    return next((a for a in APPS.values() if a.package == package), None)
