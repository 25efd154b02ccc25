"""``miniwob/suite``: one Chromium sandbox that runs any MiniWoB++ task, chosen per episode
with ``reset(options={"task": ...})``; in-process and served by ``farm serve``."""

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

import farm  # noqa: E402
from env_adapters.browser import miniwob as M  # noqa: E402
from farm.errors import (  # noqa: E402
    ConfigError,
    FailedPreconditionError,
    InvalidArgumentError,
)
from farm.registry import make, registered  # noqa: E402
from farm.server.process import ServerProcess  # noqa: E402

TASKS = [
    "click-button",
    "click-tab",
    "enter-text",
    "click-checkboxes-large",
    "click-button-infeasible",
]


@pytest.fixture(scope="module")
def suite() -> Iterator[Any]:
    env = make("miniwob/suite", tasks=TASKS)
    yield env
    env.close()


def ref_of(obs: dict[str, Any], role: str, name: str) -> int:
    for line in obs["text"].splitlines():
        if f"] {role} {json.dumps(name)} " in line:
            return int(line[1 : line.index("]")])
    raise AssertionError(f"no {role} {name!r} in\n{obs['text']}")


def test_registered_with_the_spaces_of_single_tasks(suite: Any) -> None:
    assert "miniwob/suite" in {e.env_id for e in registered("miniwob")}
    single = M.make_env("click-button")
    assert suite.observation_space == single.observation_space
    assert suite.action_space == single.action_space
    assert suite.observation_space["screenshot"].shape == (210, 160, 3)
    assert suite.metadata["farm.task"] == "miniwob/suite"
    assert suite.metadata["farm.tasks"] == TASKS
    everything = M.suite_task_names()
    assert set(M.TASKS) < set(everything)
    assert {f"{n}-infeasible" for n in M.INFEASIBLE} < set(everything)


def test_bad_construction_arguments() -> None:
    with pytest.raises(ConfigError, match="did you mean click-button"):
        M.MiniWoBSuiteEnv(["click-buton"])
    with pytest.raises(ConfigError, match="default_task"):
        M.MiniWoBSuiteEnv(["click-button"], default_task="click-tab")
    with pytest.raises(ConfigError, match="list of task names"):
        M.MiniWoBSuiteEnv("click-button")  # type: ignore[arg-type]


def test_switching_tasks_across_resets(suite: Any) -> None:
    obs, info = suite.reset(seed=0)  # no option: the default (first) task
    assert info["task"] == "miniwob/click-button" and info["feasible"] is True
    assert obs["instruction"].startswith("Click on the ")
    label = re.search(r'"(.*?)"', obs["instruction"]).group(1)  # type: ignore[union-attr]
    _, reward, terminated, _, _ = suite.step(f"click_element({ref_of(obs, 'button', label)})")
    assert (reward, terminated) == (1.0, True)

    obs, info = suite.reset(seed=3, options={"task": "click-tab"})
    assert info["task"] == "miniwob/click-tab" and info["browser_context"] == "new"
    assert re.fullmatch(r"Click on Tab #\d\.", obs["instruction"])
    assert '] tab "Tab #1" ' in obs["text"] and "button" not in obs["text"]
    tab = obs["instruction"][len("Click on ") : -1]
    _, reward, terminated, _, info = suite.step(f"click_element({ref_of(obs, 'tab', tab)})")
    assert (reward, terminated) == (1.0, True), info
    # the spare was prepared for click-tab: the same task again starts on the preloaded page
    again, info = suite.reset(seed=3, options={"task": "miniwob/click-tab"})
    assert info["browser_context"] == "preloaded"
    assert again["instruction"] == obs["instruction"] and again["text"] == obs["text"]

    obs, info = suite.reset(seed=7, options={"task": "enter-text", "data_mode": "test"})
    assert info["task"] == "miniwob/enter-text" and info["browser_context"] == "new"
    assert obs["instruction"].startswith("Enter ") and '] textbox "" value="" ' in obs["text"]
    assert suite.task.max_steps == M.DEFAULT_MAX_STEPS
    suite.reset(seed=1, options={"task": "click-checkboxes-large"})
    assert suite.task.max_steps == 2 * M.DEFAULT_MAX_STEPS  # each task's own max_steps


def test_same_seed_same_episode_as_the_single_task_env(suite: Any) -> None:
    single = make("miniwob/click-checkboxes-large")
    try:
        for seed in (4, 5):
            a, _ = suite.reset(seed=seed, options={"task": "click-checkboxes-large"})
            b, info = single.reset(seed=seed)
            assert info["task"] == "miniwob/click-checkboxes-large"
            assert a["instruction"] == b["instruction"] and a["text"] == b["text"]
    finally:
        single.close()


def test_infeasible_variant_via_the_option(suite: Any) -> None:
    obs, info = suite.reset(seed=2, options={"task": "click-button-infeasible"})
    assert info["task"] == "miniwob/click-button-infeasible" and info["feasible"] is False
    variant = M.INFEASIBLE["click-button"]
    assert obs["instruction"] in {variant.template.format(x) for x in variant.candidates}
    _, reward, terminated, _, info = suite.step("fail()")
    assert (reward, terminated, info["declared"]) == (1.0, True, "fail")
    _, info = suite.reset(seed=2, options={"task": "click-button"})
    assert info["feasible"] is True


def test_bad_task_is_a_clear_error_and_the_env_lives_on(suite: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="did you mean click-button"):
        suite.reset(seed=0, options={"task": "click-buton"})
    with pytest.raises(InvalidArgumentError, match="not one of the 5 tasks"):
        suite.reset(seed=0, options={"task": "click-link"})  # exists, but not allowed here
    with pytest.raises(InvalidArgumentError, match="must be a task name"):
        suite.reset(seed=0, options={"task": 3})
    obs, info = suite.reset(seed=0, options={"task": "click-tab"})
    assert info["task"] == "miniwob/click-tab" and obs["instruction"].startswith("Click on Tab")


def test_served_over_grpc_with_reset_options(sock_dir: str) -> None:
    kwargs = {"tasks": ["click-button", "click-tab"], "default_task": "click-tab"}
    srv = ServerProcess(
        "miniwob/suite", address=f"unix://{sock_dir}/suite.sock", env_kwargs=json.dumps(kwargs)
    )
    srv.start()
    try:
        env = farm.connect(srv.address)
        try:
            assert env.metadata["farm.task"] == "miniwob/suite"
            assert env.metadata["farm.tasks"] == ["click-button", "click-tab"]
            assert env.observation_space["screenshot"].shape == (210, 160, 3)
            obs, info = env.reset(seed=1)
            assert info["task"] == "miniwob/click-tab"
            obs, info = env.reset(seed=1, options={"task": "click-button", "data_mode": "test"})
            assert info["task"] == "miniwob/click-button" and info["feasible"] is True
            label = re.search(r'"(.*?)"', obs["instruction"]).group(1)  # type: ignore[union-attr]
            _, reward, terminated, _, _ = env.step(f"click_element({ref_of(obs, 'button', label)})")
            assert (reward, terminated) == (1.0, True)
            with pytest.raises(InvalidArgumentError, match=r"no miniwob/suite task 'nope'"):
                env.reset(options={"task": "nope"})
            with pytest.raises(FailedPreconditionError):
                env.step("wait(1)")
            obs, info = env.reset(seed=1, options={"task": "click-tab"})  # the session lives on
            assert info["task"] == "miniwob/click-tab"
            assert obs["instruction"].startswith("Click on Tab")
        finally:
            env.close()
    finally:
        srv.stop()


def test_reuse_page_restarts_episodes_in_place_and_keeps_other_tasks_pages() -> None:
    """``reuse_page``: the next episode of a task starts on its page (as the miniwob
    package does), pages of other tasks stay open, and seeds give the same episodes
    as fresh contexts."""
    fresh = make("miniwob/suite", tasks=TASKS)
    reuse = make("miniwob/suite", tasks=TASKS, reuse_page=True, keep_pages=2)
    try:
        kinds = []
        for task, seed in [
            ("click-button", 5),
            ("click-button", 6),
            ("enter-text", 7),
            ("click-button", 8),
            ("click-tab", 9),
            ("enter-text", 10),
            ("click-button-infeasible", 11),
        ]:
            obs_r, info_r = reuse.reset(seed=seed, options={"task": task})
            obs_f, _ = fresh.reset(seed=seed, options={"task": task})
            assert obs_r["instruction"] == obs_f["instruction"], task
            strip = re.compile(r"^\[\d+\] ", re.M)  # refs keep counting on a reused page
            assert strip.sub("", obs_r["text"]) == strip.sub("", obs_f["text"]), task
            kinds.append(info_r["browser_context"])
            if task == "click-button":  # finish the episode: the next one restarts anyway
                _, reward, terminated, _, _ = reuse.step(
                    f"click_element({ref_of(obs_r, 'button', _target(obs_r))})"
                )
                assert terminated and reward == 1.0
        # first click-button page, reused; enter-text new; click-button resumed from the
        # kept pages; click-tab new (evicts nothing: 2 kept); enter-text resumed; the
        # infeasible variant is the click-button page again
        assert kinds[1] == "reused" and kinds[3] == "reused" and kinds[5] == "reused"
        assert kinds[2] in ("new", "spare", "preloaded") and kinds[4] != "reused"
        assert kinds[6] == "reused"
    finally:
        fresh.close()
        reuse.close()


def _target(obs: dict[str, Any]) -> str:
    m = re.search(r'"([^"]+)" button', obs["instruction"])
    assert m, obs["instruction"]
    return m.group(1)
