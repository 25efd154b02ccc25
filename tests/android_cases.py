"""The Android adapter tests shared by ``test_android_sim.py`` (the ``AdbDeviceSimulator``
test double through real adb and adbutils) and ``test_android_emulator.py`` (a real
emulator): each of those modules defines the ``android`` fixture, an :class:`AndroidTarget`,
and imports these tests (``from android_cases import *``).

Every test drives a real ``AndroidEnv`` through a real adb server on a private
loopback port; nothing in the adapter is mocked.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from env_adapters.android import oracles
from env_adapters.android.device import AdbServer
from env_adapters.android.env import AndroidEnv
from env_adapters.android.tasks import FEASIBLE, INFEASIBLE, SPECS
from env_adapters.gui.textview import Element
from farm.registry import make

__all__ = [
    "AndroidTarget",
    "ref_of",
    "test_adb_server_restart_mid_episode_recovers",
    "test_back_and_home_keys",
    "test_click_element_follows_the_text_view",
    "test_done_at_once_fails_every_feasible_task",
    "test_fail_scores_only_on_infeasible_tasks",
    "test_move_and_unknown_refs_are_refused",
    "test_oracle_solves_every_task",
    "test_reset_reports_time_method_and_foreground",
    "test_scaled_observations_map_coordinates",
    "test_screenshot_follows_the_screen",
    "test_select_element_picks_a_menu_option",
    "test_tap_outside_the_screen_is_refused",
    "test_text_with_spaces_and_percent_is_typed_exactly",
    "test_unsendable_text_is_refused_and_nothing_typed",
    "test_wrong_toggle_scores_zero",
]


@dataclass
class AndroidTarget:
    """Where the adapter tests run: a device and the private adb server that reaches it."""

    kind: str  # "simulator" | "emulator"
    serial: str
    server: AdbServer
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    envs: list[AndroidEnv] = field(default_factory=list)

    def make(self, task: str, **kwargs: Any) -> AndroidEnv:
        env = make(
            task,
            serial=self.serial,
            adb_port=self.server.port,
            adb_home=self.server.home,
            **{**self.env_kwargs, **kwargs},
        )
        self.envs.append(env)
        return env

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs.clear()


def ref_of(obs: dict[str, Any], name: str, role: str | None = None) -> int:
    """The ref of the text-view element named ``name`` (fails the test if absent)."""
    for el in oracles.parse_view(obs["text"]):
        if el.name == name and (role is None or el.role == role):
            return el.ref
    pytest.fail(f"no element {name!r} in the text view:\n{obs['text']}")


def meta(obs: dict[str, Any]) -> dict[str, Any]:
    return json.loads(obs["metadata"])


def element(obs: dict[str, Any], name: str, role: str | None = None) -> Element:
    ref = ref_of(obs, name, role)
    return next(e for e in oracles.parse_view(obs["text"]) if e.ref == ref)


def _play(env: AndroidEnv, task: str, seed: int) -> tuple[float, list[dict[str, Any]]]:
    trace: list[dict[str, Any]] = []
    reward, _, _ = oracles.run_episode(env, task, seed, trace=trace)
    return reward, trace


# ---------------------------------------------------------------- reset and observation


def test_reset_reports_time_method_and_foreground(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi")
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert obs["screenshot"].shape == (1280, 720, 3) and obs["screenshot"].max() > 0
    assert re.fullmatch(r"Turn Wi-Fi (on|off)\.", obs["instruction"])
    assert info["reset_method"] in ("snapshot", "app-data")
    assert 0 < info["restore_s"] <= info["reset_s"] < 30
    m = meta(obs)
    assert m["package"] == "com.android.settings" and m["app"] == "Settings"
    assert m["serial"] == android.serial and m["elements"] == len(obs["text"].splitlines())
    obs2, info2 = env.reset(seed=3)
    assert obs2["instruction"] == obs["instruction"]  # seeded
    assert info2["reset_s"] < 30


def test_screenshot_follows_the_screen(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi")
    obs, _ = env.reset(seed=0)
    obs2, *_ = env.step(f"click_element({ref_of(obs, 'Network & internet')})")
    assert "Wi-Fi" in obs2["text"]
    diff = np.abs(obs2["screenshot"].astype(int) - obs["screenshot"].astype(int))
    assert (diff.max(axis=2) > 32).mean() > 0.01  # a new screen, not the same picture


def test_click_element_follows_the_text_view(android: AndroidTarget) -> None:
    env = android.make("android/settings-auto-rotate")
    obs, _ = env.reset(seed=1)
    want = "on" if obs["instruction"].endswith("on.") else "off"
    obs, reward, term, trunc, info = env.step(f"click_element({ref_of(obs, 'Display')})")
    assert (reward, term, trunc, info) == (0.0, False, False, {})
    switch = element(obs, "Auto-rotate screen", "switch")
    assert switch.value != want
    obs, *_ = env.step(f"click_element({switch.ref})")
    assert element(obs, "Auto-rotate screen", "switch").value == want
    x, y = element(obs, "Auto-rotate screen", "switch").center  # a pixel tap works the same
    obs, *_ = env.step(f"click({x}, {y})")
    assert element(obs, "Auto-rotate screen", "switch").value != want
    obs, *_ = env.step(f"click({x}, {y})")
    assert env.step("done()")[1] == 1.0


def test_back_and_home_keys(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(f"click_element({ref_of(obs, 'Network & internet')})")
    assert meta(obs)["activity"] != ".Settings"
    obs, *_ = env.step('key("back")')
    assert meta(obs)["activity"] == ".Settings" and "Network & internet" in obs["text"]
    obs, *_ = env.step('key("home")')
    assert meta(obs)["package"] == "com.android.launcher3"
    obs, *_ = env.step(f"click_element({ref_of(obs, 'Contacts')})")
    assert meta(obs)["package"] == "com.android.contacts"


# ---------------------------------------------------------------- bad input


def test_tap_outside_the_screen_is_refused(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi")
    obs, _ = env.reset(seed=0)
    for action in ("click(720, 10)", "click(-1, 10)", "right_click(10, 5000)",
                   "drag(10, 10, 10, 1280)", "scroll(10, 99999, 0, 100)"):  # fmt: skip
        obs2, reward, term, trunc, info = env.step(action)
        assert "outside the screen" in info["action_error"], action
        assert "0..719" in info["action_error"] and (reward, term, trunc) == (0.0, False, False)
        assert meta(obs2)["action_error"] == info["action_error"]
    assert env.step(f"click_element({ref_of(obs, 'Display')})")[4] == {}  # the episode goes on


def test_unsendable_text_is_refused_and_nothing_typed(android: AndroidTarget) -> None:
    env = android.make("android/contacts-add")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(f"click_element({ref_of(obs, 'Create contact')})")
    first = ref_of(obs, "First name", "textbox")
    for action in (f'type_element({first}, "Zoë")', 'type("caf\\u00e9 \\u2713")', 'type("a\\tb")'):
        obs, _reward, term, trunc, info = env.step(action)
        assert "cannot send" in info["action_error"] and not (term or trunc), action
        assert element(obs, "First name", "textbox").value == ""  # nothing half-typed
    obs, *_ = env.step(f'type_element({first}, "Zoe")')
    assert element(obs, "First name", "textbox").value == "Zoe"
    too_long = "x" * 1001
    info = env.step(f'type("{too_long}")')[4]
    assert "longer than the limit of 1,000" in info["action_error"]


def test_text_with_spaces_and_percent_is_typed_exactly(android: AndroidTarget) -> None:
    env = android.make("android/contacts-add")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(f"click_element({ref_of(obs, 'Create contact')})")
    text = "50% off %s & 'quotes' \"too\" ; $HOME `x` \\ end"
    obs, *_ = env.step(f"type_element({ref_of(obs, 'First name', 'textbox')}, {json.dumps(text)})")
    assert element(obs, "First name", "textbox").value == text
    obs, *_ = env.step(f'type_element({ref_of(obs, "First name", "textbox")}, "short")')
    assert element(obs, "First name", "textbox").value == "short"  # typed over, not appended


def test_move_and_unknown_refs_are_refused(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi")
    obs, _ = env.reset(seed=0)
    n = len(obs["text"].splitlines())
    info = env.step("click_element(9999)")[4]
    assert info["action_error"] == f"no element with ref 9999; refs in the text view are 1..{n}"
    assert "touch screen" in env.step("move(10, 10)")[4]["action_error"]
    assert "no key" in env.step('key("ctrl+\\u00e9")')[4]["action_error"]
    display = ref_of(obs, "Display")
    assert "not a text box" in env.step(f'type_element({display}, "x")')[4]["action_error"]
    assert "cannot parse" in env.step("tap there")[4]["action_error"]


def test_select_element_picks_a_menu_option(android: AndroidTarget) -> None:
    env = android.make("android/files-create-folder")
    obs, _ = env.reset(seed=0)
    assert meta(obs)["package"] == "com.android.documentsui"  # launched by package
    more = ref_of(obs, "More options", "button")
    obs, _, _, _, info = env.step(f'select_element({more}, "Paste")')
    assert (
        "opened no option 'Paste'" in info["action_error"]
        and "'New folder'" in info["action_error"]
    )
    assert "Folder name" not in obs["text"] and "New folder" not in obs["text"]  # menu closed
    obs, _, _, _, info = env.step(f'select_element({more}, "new folder")')
    assert info == {} and ref_of(obs, "Folder name", "textbox")


def test_adb_server_restart_mid_episode_recovers(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi")
    obs, _ = env.reset(seed=0)
    starts = env.server.starts  # the env's own handle on the same server
    android.server.kill()
    assert not android.server.running()
    obs, _, _, trunc, info = env.step(f"click_element({ref_of(obs, 'Network & internet')})")
    assert not trunc and "action_error" not in info, info
    assert android.server.running() and env.server.starts == starts + 1
    assert any("adb server" in e for e in meta(obs)["adb_events"])
    assert "Wi-Fi" in obs["text"]  # the tap went through after the restart


# ---------------------------------------------------------------- tasks


@pytest.mark.parametrize("task", [*FEASIBLE, *INFEASIBLE])
def test_oracle_solves_every_task(android: AndroidTarget, task: str) -> None:
    env = android.make(task)
    for seed in (0, 1):
        reward, trace = _play(env, task, seed)
        assert reward == 1.0 and trace[-1]["terminated"], (seed, trace[-1])
        assert trace[-1]["info"]["declared"] == ("done" if SPECS[task].feasible else "fail")


@pytest.mark.parametrize("task", FEASIBLE)
def test_done_at_once_fails_every_feasible_task(android: AndroidTarget, task: str) -> None:
    env = android.make(task)
    env.reset(seed=0)
    _, reward, term, trunc, info = env.step("done()")
    assert (reward, term, trunc) == (0.0, True, False), info
    assert "check" in info  # the checker read the device's state


def test_fail_scores_only_on_infeasible_tasks(android: AndroidTarget) -> None:
    for task in (*INFEASIBLE, FEASIBLE[0]):
        env = android.make(task)
        env.reset(seed=0)
        want = 0.0 if SPECS[task].feasible else 1.0
        assert env.step("fail()")[1:3] == (want, True)
        env.reset(seed=0)
        assert env.step("done()")[1] == 0.0  # done() never scores on an infeasible task


def test_wrong_toggle_scores_zero(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(f"click_element({ref_of(obs, 'Network & internet')})")
    obs, *_ = env.step(f"click_element({ref_of(obs, 'Airplane mode', 'switch')})")
    assert env.step("done()")[1] == 0.0


def test_scaled_observations_map_coordinates(android: AndroidTarget) -> None:
    env = android.make("android/settings-wifi", width=360, height=640)
    obs, _ = env.reset(seed=0)
    assert obs["screenshot"].shape == (640, 360, 3)
    row = element(obs, "Network & internet")
    assert row.box[2] == 360  # a full-width row at half scale
    obs, *_ = env.step(f"click({row.center[0]}, {row.center[1]})")
    assert "Wi-Fi" in obs["text"]


def step_times(env: AndroidEnv, actions: Callable[[dict[str, Any]], str], n: int) -> list[float]:
    """Wall times of ``n`` steps (for the printed measurements)."""
    obs, _ = env.reset(seed=0)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        obs, *_ = env.step(actions(obs))
        times.append(time.perf_counter() - t0)
    return times


def adb_devices(server: AdbServer) -> str:
    proc: subprocess.CompletedProcess[str] = server.run("devices", "-l")
    return proc.stdout
