"""farm's MiniWoB envs reproduce the miniwob package's own envs.

For several tasks and seeds, the same actions are played in ``miniwob/<task>``
(farm, :class:`env_adapters.browser.env.BrowserEnv`) and in
``gymnasium.make("miniwob/<task>-v1")`` (the package's Selenium env, driving
the same Chromium through chromedriver). Target elements are mapped between
the two by a stable property (element id, or tag and text). Asserted: the same
utterance for the same seed, and after every action the same raw reward
(``WOB_RAW_REWARD_GLOBAL``) and the same termination.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"needs Chromium at {CHROMIUM}"),
    pytest.mark.skipif(not os.path.exists(CHROMEDRIVER), reason="needs chromedriver"),
]

pytest.importorskip("playwright.async_api", reason="needs playwright (pip install farm[browser])")
miniwob = pytest.importorskip("miniwob", reason="needs miniwob (pip install farm[browser])")

import gymnasium as gym  # noqa: E402
from miniwob.action import ActionTypes  # noqa: E402

from env_adapters.browser import miniwob as farm_miniwob  # noqa: E402
from env_adapters.browser.env import BrowserEnv  # noqa: E402

gym.register_envs(miniwob)

SEEDS = (0, 1, 2)
_LINE = re.compile(r'\[(\d+)\] (\S+) ("(?:[^"\\]|\\.)*")')


@dataclass(frozen=True)
class Target:
    """An element, found in both envs by its id or by (farm role, package tag, text)."""

    id: str | None = None
    role: str | None = None
    tag: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class Click:
    target: Target


@dataclass(frozen=True)
class TypeInto:
    target: Target
    text: str


Step = Click | TypeInto


# ------------------------------------------------------------------ finding elements


def farm_elements(obs: dict[str, Any]) -> list[tuple[int, str, str]]:
    """(ref, role, name) of every text-view line."""
    out = []
    for line in obs["text"].splitlines():
        m = _LINE.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2), json.loads(m.group(3))))
    return out


def farm_ref(env: BrowserEnv, obs: dict[str, Any], target: Target) -> int:
    if target.id is not None:
        ref = env._run(
            env.sandbox.page.evaluate(
                "(id) => +document.getElementById(id).getAttribute('data-farm-ref')", target.id
            )
        )
        assert ref, f"#{target.id} is not in farm's text view:\n{obs['text']}"
        return int(ref)
    for ref, role, name in farm_elements(obs):
        if role == target.role and name == target.text:
            return ref
    raise AssertionError(f"no {target} in farm's text view:\n{obs['text']}")


def package_ref(obs: dict[str, Any], target: Target) -> int:
    for el in obs["dom_elements"]:
        if target.id is not None:
            if el["id"] == target.id:
                return int(el["ref"])
        elif el["tag"] == target.tag and el["text"] == target.text:
            return int(el["ref"])
    raise AssertionError(f"no {target} among the package's dom elements")


def farm_checkbox_ids(env: BrowserEnv, obs: dict[str, Any]) -> dict[str, str]:
    """Checkbox label -> element id, from farm's text view."""
    ids = {}
    for ref, role, name in farm_elements(obs):
        if role == "checkbox":
            ids[name] = env._run(
                env.sandbox.page.evaluate(
                    '(r) => document.querySelector(`[data-farm-ref="${r}"]`).id', ref
                )
            )
    return ids


# ------------------------------------------------------------------ scripted policies
# seed 2 plays a wrong answer, so negative and partial rewards are compared too


def quoted(utterance: str) -> str:
    m = re.search(r'"(.*?)"', utterance)
    assert m, utterance
    return m.group(1)


def click_button(env: BrowserEnv, obs: dict[str, Any], seed: int) -> list[Step]:
    label = quoted(obs["instruction"])
    if seed == 2:
        others = [n for _, role, n in farm_elements(obs) if role == "button" and n != label]
        if others:
            label = others[0]
    return [Click(Target(role="button", tag="button", text=label))]


def click_link(env: BrowserEnv, obs: dict[str, Any], seed: int) -> list[Step]:
    word = quoted(obs["instruction"])
    if seed == 2:
        others = [n for _, role, n in farm_elements(obs) if role == "span" and n != word]
        if others:
            word = others[0]
    return [Click(Target(role="span", tag="span", text=word))]


def click_checkboxes(env: BrowserEnv, obs: dict[str, Any], seed: int) -> list[Step]:
    m = re.match(r"Select (.*) and click Submit\.", obs["instruction"])
    assert m, obs["instruction"]
    wanted = [] if m.group(1) == "nothing" else m.group(1).split(", ")
    ids = farm_checkbox_ids(env, obs)
    chosen = list(ids) if seed == 2 else wanted  # seed 2: tick every box (partial reward)
    steps: list[Step] = [Click(Target(id=ids[name])) for name in chosen]
    return [*steps, Click(Target(id="subbtn"))]


def enter_text(env: BrowserEnv, obs: dict[str, Any], seed: int) -> list[Step]:
    word = quoted(obs["instruction"])
    text = word[::-1] if seed == 2 else word
    return [TypeInto(Target(id="tt"), text), Click(Target(id="subbtn"))]


def click_tab(env: BrowserEnv, obs: dict[str, Any], seed: int) -> list[Step]:
    m = re.search(r"Tab #(\d)", obs["instruction"])
    assert m, obs["instruction"]
    n = int(m.group(1)) if seed != 2 else int(m.group(1)) % 3 + 1
    return [Click(Target(role="tab", tag="a", text=f"Tab #{n}"))]


POLICIES: dict[str, Callable[[BrowserEnv, dict[str, Any], int], list[Step]]] = {
    "click-button": click_button,
    "click-link": click_link,
    "click-checkboxes": click_checkboxes,
    "enter-text": enter_text,
    "click-tab": click_tab,
}


# ------------------------------------------------------------------ the test


@pytest.fixture(scope="module")
def chromedriver_env() -> Iterator[None]:
    """The package's env vars for a system Chromium (read in SeleniumInstance.create_driver)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIWOB_CHROME_BINARY", CHROMIUM)
        mp.setenv("MINIWOB_CHROMEDRIVER", CHROMEDRIVER)
        yield


@pytest.mark.parametrize("task", list(POLICIES))
def test_same_utterances_and_raw_rewards_as_the_miniwob_package(
    task: str, chromedriver_env: None
) -> None:
    ours = farm_miniwob.make_env(task)
    theirs = gym.make(f"miniwob/{task}-v1")
    package = theirs.unwrapped
    outcomes = []
    try:
        for seed in SEEDS:
            obs, _ = ours.reset(seed=seed)
            pobs, _ = theirs.reset(seed=seed)
            assert obs["instruction"] == pobs["utterance"], (task, seed)
            for i, step in enumerate(POLICIES[task](ours, obs, seed)):
                ref = farm_ref(ours, obs, step.target)
                pref = package_ref(pobs, step.target)
                if isinstance(step, Click):
                    action = f"click_element({ref})"
                    paction = package.create_action(ActionTypes.CLICK_ELEMENT, ref=pref)
                else:
                    action = f"type_element({ref}, {json.dumps(step.text)})"
                    paction = package.create_action(
                        ActionTypes.FOCUS_ELEMENT_AND_TYPE_TEXT, ref=pref, text=step.text
                    )
                obs, reward, terminated, truncated, info = ours.step(action)
                pobs, _, pterminated, _, pinfo = theirs.step(paction)
                where = f"{task} seed {seed} step {i} ({action}): {info}"
                assert "action_error" not in info, where
                assert reward == pytest.approx(float(pinfo["raw_reward"])), where
                assert terminated == pterminated, where
                assert not truncated, where
            assert terminated, f"{task} seed {seed}: the episode did not end"
            outcomes.append(reward)
    finally:
        ours.close()
        theirs.close()
    # the scripted answers are right for seeds 0 and 1
    assert outcomes[0] == outcomes[1] == 1.0, outcomes
