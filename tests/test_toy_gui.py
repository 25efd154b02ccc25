"""``toy/gui``: pure-Python MiniWoB-like tasks with the GUI sandboxes' spaces, episode rules
and injectable latency; in-process (sync and async forms) and served over farm gRPC."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import farm
from env_adapters.gui import actions as A
from env_adapters.gui import spaces as S
from env_adapters.gui.textview import parse_text_view
from env_adapters.toy.gui import (
    FEASIBLE_TASKS,
    TASKS,
    ToyGuiEnv,
    oracle_action,
)
from env_adapters.toy.latency import Latency
from farm.errors import ConfigError, FailedPreconditionError, InvalidArgumentError
from farm.registry import make
from farm.server import BackgroundServer, ServerConfig

SEEDS = range(12)


def ref_of(obs: dict[str, Any], role: str, name: str | None = None) -> int:
    for el in parse_text_view(obs["text"]):
        if el.role == role and (name is None or el.name == name):
            return el.ref
    raise AssertionError(f"no {role} {name!r} in\n{obs['text']}")


def box_of(obs: dict[str, Any], ref: int) -> tuple[int, int, int, int]:
    line = obs["text"].splitlines()[ref - 1]
    x, y, w, h = map(int, re.search(r"@\((.*)\)$", line).group(1).split(","))  # type: ignore[union-attr]
    return x, y, w, h


def play(env: Any, obs: dict[str, Any], structured: bool = False) -> tuple[float, bool, int]:
    """The oracle's episode: (last reward, terminated, steps)."""
    for steps in range(1, 20):
        action: Any = oracle_action(obs)
        if structured:
            action = S.to_structured(A.parse_action(action))
        obs, reward, terminated, truncated, info = env.step(action)
        assert "action_error" not in info, info
        if terminated or truncated:
            return reward, terminated, steps
        assert reward == 0.0
    raise AssertionError("the oracle did not finish")


def test_registered_with_the_gui_spaces() -> None:
    env = make("toy/gui")
    assert isinstance(env, ToyGuiEnv)
    assert env.observation_space == S.observation_space(64, 48)
    assert env.action_space == S.text_action_space()
    assert env.metadata["farm.task"] == "toy/gui" and env.metadata["farm.kind"] == "toy"
    assert env.metadata["farm.tasks"] == list(TASKS)
    big = make("toy/gui", width=160, height=210, action_format="structured")
    assert big.observation_space == S.observation_space(160, 210)
    assert big.action_space == S.structured_action_space()
    obs, info = big.reset(seed=0)
    assert obs["screenshot"].shape == (210, 160, 3) and obs["screenshot"].dtype == np.uint8
    assert info["task"] == "toy/gui/click-button"  # the default: the first task


@pytest.mark.parametrize("task", FEASIBLE_TASKS)
def test_the_oracle_solves_every_task(task: str) -> None:
    env = ToyGuiEnv()
    pages = set()
    for seed in SEEDS:
        obs, info = env.reset(seed=seed, options={"task": task})
        assert info["task"] == f"toy/gui/{task}" and info["feasible"] is True
        lines = obs["text"].splitlines()
        assert lines[0] == f"[1] div {json.dumps(obs['instruction'])} @(0,0,160,50)"
        assert all(
            re.fullmatch(r'\[\d+\] \S+ ".*"( value=".*")?( focused)? @\(.*\)', ln) for ln in lines
        )
        pages.add(obs["text"])
        assert play(env, obs)[:2] == (1.0, True)
    assert len(pages) > 1


@pytest.mark.parametrize("task", ["click-button", "click-link"])
def test_infeasible_variants(task: str) -> None:
    env = ToyGuiEnv()
    for seed in SEEDS:
        obs, info = env.reset(seed=seed, options={"task": f"{task}-infeasible"})
        assert info["feasible"] is False
        target = re.search(r'"(.*)"', obs["instruction"]).group(1)  # type: ignore[union-attr]
        assert f'"{target}"' not in "\n".join(obs["text"].splitlines()[1:])
        assert oracle_action(obs) == "fail()"
        assert play(env, obs)[:2] == (1.0, True)
    # any other ending earns 0 (as in every GUI sandbox)
    role = "button" if task == "click-button" else "span"
    obs, _ = env.reset(seed=1, options={"task": f"{task}-infeasible"})
    _, reward, terminated, _, info = env.step(f"click_element({ref_of(obs, role)})")
    assert (reward, terminated, info["infeasible_task"]) == (0.0, True, True)
    env.reset(seed=1, options={"task": f"{task}-infeasible"})
    assert env.step("done()")[1:3] == (0.0, True)


def test_wrong_endings_score_minus_one() -> None:
    env = ToyGuiEnv(max_steps=30)
    for seed in SEEDS:
        obs, _ = env.reset(seed=seed, options={"task": "click-button"})
        right = oracle_action(obs)
        buttons = [e.ref for e in parse_text_view(obs["text"]) if e.role == "button"]
        wrong = next(f"click_element({r})" for r in buttons if f"click_element({r})" != right)
        _, reward, terminated, _, info = env.step(wrong)
        assert (reward, terminated) == (-1.0, True) and "wrong" in info["reason"]
    obs, _ = env.reset(seed=0, options={"task": "click-tab"})
    tab = next(e.ref for e in parse_text_view(obs["text"]) if e.role == "tab")
    if f"click_element({tab})" == oracle_action(obs):
        tab += 1
    assert env.step(f"click_element({tab})")[1:3] == (-1.0, True)
    obs, _ = env.reset(seed=0, options={"task": "click-link"})
    spans = [e.ref for e in parse_text_view(obs["text"]) if e.role == "span"]
    wrong = next(
        f"click_element({r})" for r in spans if f"click_element({r})" != oracle_action(obs)
    )
    assert env.step(wrong)[1:3] == (-1.0, True)
    # Submit with nothing checked / the wrong text
    obs, _ = env.reset(seed=0, options={"task": "click-checkboxes"})
    assert env.step(f"click_element({ref_of(obs, 'button', 'Submit')})")[1:3] == (-1.0, True)
    obs, _ = env.reset(seed=0, options={"task": "enter-text"})
    env.step(f'type_element({ref_of(obs, "textbox")}, "wrong")')
    assert env.step(f"click_element({ref_of(obs, 'button', 'Submit')})")[1:3] == (-1.0, True)
    # a distractor is 0 and the episode goes on; fail() on a feasible task ends it with 0
    obs, _ = env.reset(seed=0, options={"task": "click-button"})
    distractor = next(e.ref for e in parse_text_view(obs["text"]) if e.role == "div" and e.ref > 1)
    assert env.step(f"click_element({distractor})")[1:4] == (0.0, False, False)
    _, reward, terminated, _, info = env.step("fail()")
    assert (reward, terminated, info["declared"]) == (0.0, True, "fail")
    env.reset(seed=0, options={"task": "click-button"})
    assert env.step("done()")[1:3] == (0.0, True)


def test_pointer_keyboard_and_bad_actions() -> None:
    env = ToyGuiEnv(max_steps=30)
    obs, _ = env.reset(seed=4, options={"task": "enter-text"})
    word = re.search(r'"(.*)"', obs["instruction"]).group(1)  # type: ignore[union-attr]
    box = ref_of(obs, "textbox")
    obs, *_ = env.step('type("zz")')  # nothing focused: typing does nothing
    assert '] textbox "" value="" @' in obs["text"]
    x, y, w, h = box_of(obs, box)
    obs, reward, *_ = env.step(f"click({x + w // 2}, {y + h // 2})")  # focuses the textbox
    assert reward == 0.0 and re.search(r'textbox "" value="" focused @', obs["text"])
    obs, *_ = env.step(f"type({json.dumps(word + 'x')})")
    obs, *_ = env.step('key("Backspace")')
    assert f'value="{word}" focused' in obs["text"]
    errors = {
        "click(500, 10)": "outside the 160x210 page",
        "click_element(99)": "no element with ref 99",
        f'type_element({ref_of(obs, "button", "Submit")}, "a")': "does not take text",
        'select_element(2, "a")': "not a <select>",
        'key("nosuchkey")': "unknown key",
        "clik(1, 2)": "unknown action",
        f'type("{"a" * 2001}")': "longer than the limit",
    }
    for action, message in errors.items():
        obs, reward, terminated, truncated, info = env.step(action)
        assert message in info["action_error"], (action, info)
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert message in json.loads(obs["metadata"])["action_error"]
    assert f'value="{word}"' in obs["text"]  # the no-op steps changed nothing
    x, y, w, h = box_of(obs, ref_of(obs, "button", "Submit"))
    assert env.step(f"click({x + 1}, {y + h - 1})")[1:3] == (1.0, True)
    # double click toggles a checkbox twice; a click on the instruction does nothing
    obs, _ = env.reset(seed=0, options={"task": "click-checkboxes"})
    x, y, w, h = box_of(obs, ref_of(obs, "checkbox"))
    obs, *_ = env.step(f"double_click({x + 2}, {y + 2})")
    assert "checked" not in obs["text"].replace("unchecked", "")
    obs, *_ = env.step(f"click({x + 2}, {y + 2})")
    assert obs["text"].count('value="checked"') == 1
    assert env.step("click(80, 25)")[1:3] == (0.0, False)


def test_structured_actions() -> None:
    env = ToyGuiEnv(action_format="structured")
    for task in FEASIBLE_TASKS:
        obs, _ = env.reset(seed=3, options={"task": task})
        assert play(env, obs, structured=True)[:2] == (1.0, True)
    obs, _ = env.reset(seed=3)
    _, _, _, _, info = env.step(S.to_structured(A.ClickElement(77)))
    assert "no element with ref 77" in info["action_error"]


def test_seeds_reproduce_episodes_and_task_options() -> None:
    env = ToyGuiEnv(tasks=["click-tab", "toy/gui/focus-text"], default_task="focus-text")
    _, info = env.reset(seed=5)
    assert info["task"] == "toy/gui/focus-text"
    b, _ = env.reset(seed=5, options={"task": "click-tab"})
    c, _ = ToyGuiEnv().reset(seed=5, options={"task": "click-tab"})
    assert b["text"] == c["text"] and (b["screenshot"] == c["screenshot"]).all()
    assert any(
        ToyGuiEnv().reset(seed=s, options={"task": "click-tab"})[0]["text"] != b["text"]
        for s in range(6, 12)
    )
    with pytest.raises(InvalidArgumentError, match="did you mean click-tab"):
        env.reset(seed=0, options={"task": "click-tabs"})
    with pytest.raises(InvalidArgumentError, match="not one of the 2 tasks"):
        env.reset(seed=0, options={"task": "click-button"})
    with pytest.raises(InvalidArgumentError, match="must be a task name"):
        env.reset(seed=0, options={"task": ["click-tab"]})
    obs, info = env.reset(seed=0, options={"task": "click-tab"})  # still works
    assert info["task"] == "toy/gui/click-tab" and play(env, obs)[0] == 1.0
    for kwargs, message in (
        ({"tasks": ["nope"]}, "unknown tasks"),
        ({"tasks": "click-tab"}, "list of task names"),
        ({"tasks": ["click-tab"], "default_task": "focus-text"}, "default_task"),
        ({"step_latency": {"dist": "weibull"}}, "dist must be one of"),
        ({"reset_latency": {"median": 1}}, "unknown latency keys"),
    ):
        with pytest.raises(ConfigError, match=message):
            ToyGuiEnv(**kwargs)


def test_max_steps_truncates() -> None:
    env = make("toy/gui", max_steps=3)
    env.reset(seed=0, options={"task": "click-checkboxes"})
    results = [env.step("wait(10)")[1:4] for _ in range(3)]
    assert results == [(0.0, False, False), (0.0, False, False), (0.0, False, True)]


def test_check_env_on_the_sync_form() -> None:
    check_env(ToyGuiEnv(), skip_render_check=True)
    check_env(ToyGuiEnv(action_format="structured"), skip_render_check=True)


def test_async_form_and_concurrent_latency() -> None:
    envs = [
        ToyGuiEnv(step_latency={"dist": "constant", "median_s": 0.05}, latency_seed=i)
        for i in range(64)
    ]

    async def episode(env: ToyGuiEnv, seed: int) -> float:
        obs, info = await env.areset(seed=seed, options={"task": TASKS[seed % 6]})
        assert info["delay_s"] == 0.0
        while True:
            obs, reward, terminated, truncated, info = await env.astep(oracle_action(obs))
            assert info["delay_s"] == 0.05
            if terminated or truncated:
                await env.aclose()
                return reward

    async def main() -> list[float]:
        return await asyncio.gather(*(episode(env, i) for i, env in enumerate(envs)))

    start = time.perf_counter()
    rewards = asyncio.run(main())
    elapsed = time.perf_counter() - start
    assert rewards == [1.0] * 64
    assert 0.05 <= elapsed < 1.5  # 64 envs sleep concurrently: about 4 steps' worth


def test_latency_sync_sleeps_and_distribution_medians() -> None:
    env = ToyGuiEnv(
        step_latency={"dist": "constant", "median_s": 0.03},
        reset_latency={"dist": "constant", "median_s": 0.02},
    )
    start = time.perf_counter()
    _, info = env.reset(seed=0)
    assert info["delay_s"] == 0.02 and time.perf_counter() - start >= 0.02
    start = time.perf_counter()
    *_, info = env.step("wait(1)")
    assert info["delay_s"] == 0.03 and time.perf_counter() - start >= 0.03
    rng = np.random.default_rng(0)
    for spec in (
        {"dist": "lognormal", "median_s": 0.05, "sigma": 1.0},
        {"dist": "pareto", "median_s": 0.05, "alpha": 1.5},
    ):
        latency = Latency.of(spec)
        samples = [latency.sample(rng) for _ in range(801)]
        assert 0.04 < float(np.median(samples)) < 0.06, spec
        assert max(samples) > 4 * 0.05  # heavy tail
    # the env draws from its own generator: same latency_seed, same delays
    draws = []
    for _ in range(2):
        env = ToyGuiEnv(step_latency={"dist": "lognormal", "median_s": 0.001}, latency_seed=7)
        env.reset(seed=0)
        draws.append([env.step("wait(1)")[4]["delay_s"] for _ in range(5)])
    assert draws[0] == draws[1] and len(set(draws[0])) == 5
    assert 0.0002 < float(np.median(draws[0])) < 0.005


def test_served_over_grpc_with_reset_options() -> None:
    def factory() -> ToyGuiEnv:
        return make("toy/gui", tasks=["click-checkboxes", "enter-text", "click-link-infeasible"])

    with BackgroundServer(factory, ServerConfig()) as srv:
        env = farm.connect(srv.address)
        try:
            assert env.observation_space == S.observation_space(64, 48)
            assert env.metadata["farm.task"] == "toy/gui"
            local, _ = factory().reset(seed=9, options={"task": "enter-text"})
            obs, info = env.reset(seed=9, options={"task": "enter-text"})
            assert info["task"] == "toy/gui/enter-text" and info["feasible"] is True
            assert obs["text"] == local["text"] and (obs["screenshot"] == local["screenshot"]).all()
            assert play(env, obs)[:2] == (1.0, True)
            obs, info = env.reset(seed=2)  # the default: the first allowed task
            assert info["task"] == "toy/gui/click-checkboxes"
            assert play(env, obs)[:2] == (1.0, True)
            obs, info = env.reset(seed=2, options={"task": "click-link-infeasible"})
            assert info["feasible"] is False and play(env, obs)[:2] == (1.0, True)
            with pytest.raises(InvalidArgumentError, match="no toy/gui task 'nope'"):
                env.reset(options={"task": "nope"})
            with pytest.raises(FailedPreconditionError):
                env.step("done()")
            obs, info = env.reset(seed=1, options={"task": "enter-text"})  # the session lives on
            assert play(env, obs)[:2] == (1.0, True)
        finally:
            env.close()
