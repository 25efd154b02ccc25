"""The AT-SPI widget view of the desktop sandbox, on real Xvfb with real GTK apps: widget
lines with boxes that hit (clicking galculator's buttons by ref computes; typing into
mousepad's text area by ref lands in the saved file), refs unique and resolved against
the observation that showed them, clear errors for element actions that cannot apply,
and the fall back to the window list (saying why) when the accessibility bus dies.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator

import pytest

from env_adapters.desktop.display import missing_prerequisites

pytestmark = pytest.mark.desktop

# fail (not skip) saying what to install when a prerequisite is missing
if (_missing := missing_prerequisites()) is not None:
    pytest.fail(_missing, pytrace=False)

from env_adapters.desktop.env import DesktopEnv  # noqa: E402
from env_adapters.desktop.oracles import Win, parse_windows  # noqa: E402
from env_adapters.desktop.tasks import make_env  # noqa: E402

REF = re.compile(r"^\s*\[(\d+)\]", re.MULTILINE)


@pytest.fixture(scope="module")
def calc() -> Iterator[DesktopEnv]:
    env = make_env("calc-add")
    yield env
    env.close()


def _window(obs: dict, wm_class: str) -> Win:
    return next(w for w in parse_windows(obs["text"]) if w.wm_class == wm_class)


def _inside(inner: tuple[int, int, int, int], outer: tuple[int, int, int, int]) -> bool:
    x, y, w, h = inner
    ox, oy, ow, oh = outer
    return w > 0 and h > 0 and ox <= x and oy <= y and x + w <= ox + ow and y + h <= oy + oh


def test_galculator_buttons_by_ref(calc: DesktopEnv) -> None:
    obs, _ = calc.reset(seed=0)
    meta = json.loads(obs["metadata"])
    assert "a11y_error" not in meta and meta["widgets"] > 20, meta
    refs = [int(r) for r in REF.findall(obs["text"])]
    assert refs == list(range(1, len(refs) + 1))  # unique, in text order
    win = _window(obs, "galculator")
    buttons = {w.name: w for w in win.widgets if w.role == "toggle_button"}
    assert set("0123456789+-*/=()") <= set(buttons), sorted(buttons)
    for b in buttons.values():  # every button lies inside the window, none overlap
        assert _inside(b.box, win.box), (b, win.box)
    seven, four = buttons["7"].box, buttons["4"].box
    assert seven[0] == four[0] and seven[1] < four[1]  # the keypad's column
    display = win.widget("text")
    assert display is not None and display.value == "0"
    # refs resolve against the observation that showed them (the env keeps it)
    assert calc._last_view.by_ref(buttons["7"].ref).name == "7"
    for char in "12+7=":
        obs, _, _, trunc, info = calc.step(f"click_element({buttons[char].ref})")
        assert "action_error" not in info and not trunc, info
    display = _window(obs, "galculator").widget("text")
    assert display is not None and display.value == "19", obs["text"]


def test_element_actions_that_do_not_apply_say_why(calc: DesktopEnv) -> None:
    obs, _ = calc.reset(seed=0)
    win = _window(obs, "galculator")
    display, button = win.widget("text"), win.widget("toggle_button", "7")
    assert display is not None and button is not None
    _, _, _, _, info = calc.step(f'type_element({display.ref}, "12")')
    assert "is not an editable text field" in info["action_error"]
    _, _, _, _, info = calc.step(f'select_element({button.ref}, "x")')
    assert "has no options: select_element works on combo boxes and lists" in (info["action_error"])
    _, _, _, _, info = calc.step(f'select_element({win.ref}, "x")')
    assert "select_element needs a list element" in info["action_error"]
    _, _, _, _, info = calc.step("click_element(999)")
    assert re.search(
        r"no element with ref 999; refs in the text view are 1-\d+", info["action_error"]
    )


def test_mousepad_text_area_by_ref_lands_in_the_file() -> None:
    env = make_env("editor-append-line")
    try:
        obs, _ = env.reset(seed=2)
        win = _window(obs, "mousepad")
        area = win.widget("text")
        assert area is not None and _inside(area.box, win.box), obs["text"]
        assert area.value is not None and area.value.startswith("buy "), area
        assert win.widget("menu", "File") is not None
        text = "written by ref"
        _, _, _, _, info = env.step(f'type_element({area.ref}, "{text}")')
        assert "action_error" not in info, info
        env.step('key("ctrl+s")')
        path = env.desktop.home / "todo.txt"
        deadline = time.monotonic() + 5
        while path.read_text() != text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.read_text() == text
        obs, *_ = env.step("wait(10)")
        area = _window(obs, "mousepad").widget("text")
        assert area is not None and area.value == text and "focused" in area.flags
    finally:
        env.close()


def test_apps_without_atspi_keep_window_lines(calc: DesktopEnv) -> None:
    env = make_env("terminal-create-file")
    try:
        obs, _ = env.reset(seed=0)
        assert obs["text"].count("\n") == 0 and obs["text"].startswith("[1] window")
        assert "a11y_error" not in json.loads(obs["metadata"])
    finally:
        env.close()


def test_bus_killed_falls_back_to_windows_then_reset_restores(calc: DesktopEnv) -> None:
    obs, _ = calc.reset(seed=0)
    assert _window(obs, "galculator").widgets
    pid = calc.desktop.a11y_bus_pid
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)  # the launcher and its bus daemon
    obs, _, term, trunc, info = calc.step("move(5, 5)")
    assert not term and not trunc and "action_error" not in info, info
    meta = json.loads(obs["metadata"])
    assert "AT-SPI unavailable" in meta["a11y_error"], meta
    assert meta["widgets"] == 0 and obs["text"].startswith("[1] window")
    assert "\n " not in obs["text"]  # window lines only
    assert "click_element" not in info
    # element actions on the last view still work for windows
    _, _, _, trunc, info = calc.step("click_element(1)")
    assert not trunc and "action_error" not in info, info
    obs, _ = calc.reset(seed=1)  # a new bus; the app started after it connects
    assert calc.desktop.a11y_bus_pid not in (None, pid)
    assert "a11y_error" not in json.loads(obs["metadata"])
    assert _window(obs, "galculator").widget("toggle_button", "7") is not None


def test_select_element_picks_a_row_of_a_list() -> None:
    """The file chooser's places list: select_element clicks the row named (the dialog
    then browses that folder, its path bar says so); an unknown option lists the options."""
    env = make_env("editor-write-new")
    try:
        env.reset(seed=0)
        (env.desktop.home / "Desktop").mkdir()
        obs, *_ = env.step('key("ctrl+s")')
        for _ in range(12):  # the episode has 25 steps
            dialog = next((w for w in parse_windows(obs["text"]) if w.title == "Save As"), None)
            if dialog is not None and dialog.focused and dialog.widget("list_box") is not None:
                break
            obs, *_ = env.step("wait(300)")
        assert dialog is not None, obs["text"]
        places = dialog.widget("list_box")
        assert places is not None
        _, _, _, _, info = env.step(f'select_element({places.ref}, "nowhere")')
        assert "has no option 'nowhere'; options: " in info["action_error"]
        assert '"Home"' in info["action_error"] and '"Desktop"' in info["action_error"]
        _, _, _, _, info = env.step(f'select_element({places.ref}, "Desktop")')
        assert "action_error" not in info, info
        for _ in range(8):
            obs, *_ = env.step("wait(250)")
            dialog = next(w for w in parse_windows(obs["text"]) if w.title == "Save As")
            crumb = dialog.widget("toggle_button", "Desktop")
            if crumb is not None and "pressed" in crumb.flags:
                break
        else:
            raise AssertionError(f"the dialog did not browse Desktop:\n{obs['text']}")
    finally:
        env.close()


def test_hung_app_gets_window_lines_and_the_reason() -> None:
    env = make_env("calc-add", hang_timeout_s=0.5, a11y_timeout_s=0.3)
    try:
        env.reset(seed=0)
        app = env.desktop.apps[0]
        os.kill(app.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        obs, _, term, trunc, _ = env.step("move(5, 5)")  # the ping finds it hung
        assert trunc and not term and time.monotonic() - t0 < 10
        meta = json.loads(obs["metadata"])
        assert f"app galculator (pid {app.pid}) did not" in meta["a11y_error"], meta
        assert meta["widgets"] == 0 and "\n " not in obs["text"]
        obs, _ = env.reset(seed=1)  # a fresh galculator answers again
        assert _window(obs, "galculator").widget("toggle_button", "7") is not None
    finally:
        env.close()
