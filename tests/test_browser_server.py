"""``farm serve miniwob/click-button`` end to end: gymnasium conformance, play, bad input.

One server (one Chromium per session) is shared by the module.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"needs Chromium at {CHROMIUM}"),
]

pytest.importorskip("playwright.async_api", reason="needs playwright (pip install farm[browser])")
pytest.importorskip("miniwob", reason="needs miniwob (pip install farm[browser])")

from gymnasium.utils.env_checker import check_env  # noqa: E402

import farm  # noqa: E402
from farm.server.process import ServerProcess  # noqa: E402


@pytest.fixture(scope="module")
def click_button(sock_dir: str) -> Iterator[ServerProcess]:
    srv = ServerProcess("miniwob/click-button", address=f"unix://{sock_dir}/click-button.sock")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def env(click_button: ServerProcess) -> Iterator[Any]:
    remote = farm.connect(click_button.address)
    yield remote
    remote.close()


def target_ref(obs: dict[str, Any]) -> int:
    """The ref of the button the instruction asks for (from the text view)."""
    label = re.search(r'"(.*?)"', obs["instruction"]).group(1)  # type: ignore[union-attr]
    for line in obs["text"].splitlines():
        if f"button {json.dumps(label)} " in line:
            return int(line[1 : line.index("]")])
    raise AssertionError(f"no button {label!r} in\n{obs['text']}")


def test_served_env_passes_check_env(click_button: ServerProcess) -> None:
    remote = farm.connect(click_button.address)
    try:
        check_env(remote, skip_render_check=True)
        assert remote.observation_space["screenshot"].shape == (210, 160, 3)
        assert remote.metadata["farm.task"] == "miniwob/click-button"
    finally:
        remote.close()


def test_reset_and_click_element_solve_the_task(env: Any) -> None:
    for seed in (0, 1, 2):
        obs, info = env.reset(seed=seed)
        assert info["task"] == "miniwob/click-button" and info["feasible"] is True
        assert obs["instruction"].startswith("Click on the ")
        assert obs["screenshot"].shape == (210, 160, 3) and obs["screenshot"].any()
        obs, reward, terminated, truncated, info = env.step(f"click_element({target_ref(obs)})")
        assert (reward, terminated, truncated) == (1.0, True, False), info
        assert 0.0 < info["env_reward"] <= 1.0  # time-penalised, in info
        assert json.loads(obs["metadata"])["last_action"].startswith("click_element(")


def test_same_seed_same_first_observation(env: Any) -> None:
    a, _ = env.reset(seed=11)
    b, _ = env.reset(seed=11)
    assert a["instruction"] == b["instruction"]
    assert a["text"] == b["text"]
    assert (a["screenshot"] == b["screenshot"]).all()


def expect_noop(env: Any, action: str, *needles: str) -> dict[str, Any]:
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated) == (0.0, False, False), info
    error = info.get("action_error", "")
    for needle in needles:
        assert needle in error, (action[:40], error)
    assert json.loads(obs["metadata"])["action_error"] == error
    return obs


def test_bad_actions_are_noops_with_clear_errors_then_the_episode_goes_on(env: Any) -> None:
    obs, _ = env.reset(seed=3)
    expect_noop(env, "click(500, 5)", "outside the 160x210 viewport", "x must be in 0..159")
    expect_noop(env, "click(-1, 5)", "outside the 160x210 viewport")
    expect_noop(env, "drag(10, 60, 10, 400)", "drag end", "160x210")
    expect_noop(
        env, "click_element(999)", "no element with ref 999", "refs in the text view are 1-"
    )
    expect_noop(env, 'type("' + "x" * 1_000_000 + '")', "1,000,000 characters", "limit of 2,000")
    expect_noop(env, "clik(10, 20)", "unknown action 'clik'")
    expect_noop(env, "click(10, 20", "cannot parse")
    expect_noop(env, 'key("ctrl+hyper")', "unknown key")
    expect_noop(env, 'select_element(1, "x")', "not a <select>")
    # the same episode still plays normally
    obs, reward, terminated, truncated, info = env.step(f"click_element({target_ref(obs)})")
    assert (reward, terminated, truncated) == (1.0, True, False), info
    obs, _ = env.reset(seed=4)
    _, reward, terminated, _, _ = env.step(f"click_element({target_ref(obs)})")
    assert (reward, terminated) == (1.0, True)


def test_wrong_button_ends_with_raw_reward_minus_one(env: Any) -> None:
    obs, _ = env.reset(seed=5)
    right = target_ref(obs)
    wrong = next(
        int(line[1 : line.index("]")])
        for line in obs["text"].splitlines()
        if " button " in line
        and int(line[1 : line.index("]")]) != right
        and re.search(r'"(.*?)"', obs["instruction"]).group(0) not in line  # type: ignore[union-attr]
    )
    _, reward, terminated, truncated, info = env.step(f"click_element({wrong})")
    assert (reward, terminated, truncated) == (-1.0, True, False), info
    assert info["env_reward"] == -1.0
