"""The MiniWoB++ suite in-process: registration, determinism, the task's own timer,
infeasible variants."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"needs Chromium at {CHROMIUM}"),
]

pytest.importorskip("playwright.async_api", reason="needs playwright (pip install farm[browser])")
pytest.importorskip("miniwob", reason="needs miniwob (pip install farm[browser])")

from env_adapters.browser import miniwob as M  # noqa: E402
from env_adapters.browser.dom import format_refs  # noqa: E402
from farm.registry import make, registered  # noqa: E402


def test_every_task_page_is_registered() -> None:
    pages = {p.stem for p in Path(M.HTML_DIR).glob("*.html")}
    assert len(pages) >= 130
    ids = {e.env_id for e in registered("miniwob")}
    assert {f"miniwob/{name}" for name in pages} <= ids
    infeasible = {i for i in ids if i.endswith("-infeasible")}
    assert len(infeasible) >= 3
    assert ids == {f"miniwob/{name}" for name in pages} | infeasible | {"miniwob/suite"}
    spec = M.task_spec("click-button")
    assert spec.kind == "browser" and spec.evaluator == {"name": "miniwob"}
    assert spec.setup["page"].startswith("file://") and spec.setup["page"].endswith(
        "/miniwob/click-button.html"
    )


def test_format_refs() -> None:
    assert format_refs([3, 1, 2, 7, 9, 10]) == "1-3, 7, 9-10"
    assert format_refs([]).startswith("none")


def test_same_seed_same_episode_and_the_task_timer_ends_it() -> None:
    env = make("miniwob/click-checkboxes", episode_time_ms=1500)
    try:
        a, _ = env.reset(seed=5)
        b, _ = env.reset(seed=5)
        c, _ = env.reset(seed=6)
        assert a["instruction"] == b["instruction"] != c["instruction"]
        assert a["text"] == b["text"]
        assert (a["screenshot"] == b["screenshot"]).all()
        assert re.search(r'\] checkbox "[^"]+" value="unchecked"', a["text"])
        env.reset(seed=5)
        _, reward, terminated, truncated, info = env.step("wait(2000)")
        # the task's own JavaScript timer: raw reward -1, reason "timed out"
        assert (reward, terminated, truncated) == (-1.0, True, False), info
        assert info["reason"] == "timed out"
    finally:
        env.close()


@pytest.mark.parametrize("task", sorted(M.INFEASIBLE))
def test_infeasible_variants_ask_for_what_is_not_there(task: str) -> None:
    env = make(f"miniwob/{task}-infeasible")
    try:
        assert env.task.feasible is False
        for seed in (0, 1):
            obs, info = env.reset(seed=seed)
            assert info["feasible"] is False
            variant = M.INFEASIBLE[task]
            asked = next(
                x for x in variant.candidates if variant.template.format(x) == obs["instruction"]
            )
            # the page shows the same (infeasible) instruction and never offers the thing
            assert json.dumps(obs["instruction"])[1:-1] in obs["text"].splitlines()[0]
            body = "\n".join(obs["text"].splitlines()[1:]).lower()
            assert f'"{asked.lower()}"' not in body and f"#{asked}" not in body
        _, reward, terminated, _, _ = env.step("fail()")
        assert (reward, terminated) == (1.0, True)
        env.reset(seed=2)
        _, reward, terminated, _, _ = env.step("done()")
        assert (reward, terminated) == (0.0, True)
        obs, _ = env.reset(seed=3)
        ref = int(obs["text"].splitlines()[-1].split("]")[0][1:])
        _, reward, _, _, _ = env.step(f"click_element({ref})")
        assert reward == 0.0  # whatever the page says, only fail() earns a reward
    finally:
        env.close()
