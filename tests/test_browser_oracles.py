"""The scripted MiniWoB++ oracles solve their tasks through a real ``farm serve``.

For every task in :data:`env_adapters.browser.oracles.ORACLES`: one server
(``farm serve miniwob/<task>`` on a unix socket), one session, seeds 0..9,
each episode must end terminated with the raw MiniWoB reward 1.0. For the
infeasible variants: ``fail()`` earns 1, clicking instead earns 0. (More seeds:
``python -m env_adapters.browser.oracles miniwob/<task> --seeds 100``; CI keeps
to 10 per task for time.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from typing import Any

import pytest

from env_adapters.browser.oracles import (
    ENCODING,
    INFEASIBLE_ORACLES,
    ORACLES,
    Element,
    Oracle,
    OracleError,
    TextViewError,
    View,
    click_element,
    oracle_for,
    parse_line,
    parse_text_view,
    run_episode,
)
from farm.server.process import ServerProcess

CHROMIUM = "/usr/bin/chromium"
SEEDS = range(10)
INFEASIBLE_SEEDS = range(5)

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason=f"Chromium is not at {CHROMIUM}"
)
needs_extra = pytest.mark.skipif(
    importlib.util.find_spec("playwright") is None or importlib.util.find_spec("miniwob") is None,
    reason="the browser extra (playwright, miniwob) is not installed",
)


# ---------------------------------------------------------------- the text-view parser


def test_parse_line_all_fields() -> None:
    line = (
        '[12] combobox "Pick \\"one\\"" value="a]b" options=["a]b","c, d"] focused disabled '
        "@(2,-3,150,19)"
    )
    e = parse_line(line)
    assert e == Element(
        ref=12,
        role="combobox",
        name='Pick "one"',
        box=(2, -3, 150, 19),
        value="a]b",
        options=("a]b", "c, d"),
        flags=("focused", "disabled"),
    )
    assert e.focused and e.disabled
    assert e.center == (77, 6)
    assert e.visible_center(160, 210) == (76, 7)


def test_parse_text_view_class_checkbox_and_more_line() -> None:
    text = "\n".join(
        [
            '[1] div "Click on the \\"x\\"." @(0,0,160,50)',
            '[2] span "" class="ui-dialog-title" @(13,91,84,11)',
            '[3] checkbox "AU" value="checked" @(6,55,20,13)',
            "... 4 more elements not listed",
        ]
    )
    one, two, three = parse_text_view(text)
    assert one.name == 'Click on the "x".' and one.value is None
    assert two.cls == "ui-dialog-title" and two.name == ""
    assert three.checked and three.role == "checkbox"


@pytest.mark.parametrize(
    "line",
    ['[1] div "x"', 'div "x" @(0,0,1,1)', '[1] div "x @(0,0,1,1)', '[1] div "x" bogus @(0,0,1,1)'],
)
def test_parse_line_rejects_malformed(line: str) -> None:
    with pytest.raises(TextViewError):
        parse_line(line)


def test_view_finds_by_role_and_name_outside_the_query() -> None:
    view = View(
        {
            "instruction": 'Click on the "ok" button.',
            "text": '[1] button "ok" @(2,3,30,20)\n[2] button "ok" @(2,63,30,20)',
        }
    )
    assert [e.ref for e in view.find("button", "ok")] == [2]
    assert [e.ref for e in view.find("button", "ok", task_area=False)] == [1, 2]
    assert oracle_for("miniwob/click-button").act(view.obs) == "click_element(2)"


def test_registry() -> None:
    assert len(ORACLES) >= 12
    assert all(task.startswith("miniwob/") and cls.task == task for task, cls in ORACLES.items())
    assert {"refs", "coords"} <= set(ENCODING.values())
    with pytest.raises(KeyError, match="no oracle"):
        oracle_for("miniwob/nope")


# ---------------------------------------------------------------- through farm serve


def _describe(seed: int, total: float, trace: list[dict[str, Any]], error: str = "") -> str:
    steps = [
        f"{t['action']} -> r={t['reward']:+.2f} term={t['terminated']} trunc={t['truncated']} "
        f"info={json.dumps(t['info'], default=str)}"
        for t in trace
    ]
    return f"seed {seed}: total {total:+.2f} {error}\n    " + "\n    ".join(steps)


@pytest.mark.browser
@needs_chromium
@needs_extra
@pytest.mark.parametrize("task", sorted(ORACLES))
@pytest.mark.timeout(240)
def test_oracle_solves_every_seed(task: str, sock_path) -> None:
    import farm

    failures: list[str] = []
    start = time.perf_counter()
    with ServerProcess(task, address=sock_path("oracle")) as srv:
        env = farm.connect(srv.address)
        try:
            oracle = ORACLES[task]()
            for seed in SEEDS:
                trace: list[dict[str, Any]] = []
                total, error = 0.0, ""
                try:
                    total, _, _ = run_episode(env, oracle, seed, trace=trace)
                except OracleError as e:
                    error = f"oracle error: {e}"
                solved = (
                    not error
                    and total == 1.0
                    and bool(trace)
                    and trace[-1]["reward"] == 1.0
                    and trace[-1]["terminated"]
                )
                if not solved:
                    failures.append(_describe(seed, total, trace, error))
        finally:
            env.close()
    elapsed = time.perf_counter() - start
    assert not failures, (
        f"{task}: {len(failures)}/{len(SEEDS)} seeds not solved ({elapsed:.1f}s):\n"
        + "\n".join(failures)
    )


class ClickFirstOracle(Oracle):
    """Clicks the first control of the task area instead of declaring the task infeasible,
    then declares done() if the click did not end the episode."""

    def policy(self, obs: dict[str, Any]):
        view = View(obs)
        for role in ("button", "tab", "checkbox", "link", "span"):
            target = view.first(role)
            if target is not None:
                yield click_element(target)
                return
        raise AssertionError(f"nothing to click in:\n{obs['text']}")


@pytest.mark.browser
@needs_chromium
@needs_extra
@pytest.mark.parametrize("task", sorted(INFEASIBLE_ORACLES))
@pytest.mark.timeout(120)
def test_infeasible_variant(task: str, sock_path) -> None:
    import farm
    from env_adapters.browser import miniwob

    registered = {f"miniwob/{name}-infeasible" for name in miniwob.INFEASIBLE}
    assert set(INFEASIBLE_ORACLES) == registered
    with ServerProcess(task, address=sock_path("infeasible")) as srv:
        env = farm.connect(srv.address)
        try:
            for seed in INFEASIBLE_SEEDS:
                trace: list[dict[str, Any]] = []
                total, _, actions = run_episode(env, oracle_for(task), seed, trace=trace)
                assert actions == ["fail()"], _describe(seed, total, trace)
                assert total == 1.0 and trace[-1]["terminated"], _describe(seed, total, trace)

                trace = []
                total, _, actions = run_episode(env, ClickFirstOracle(), seed, trace=trace)
                assert actions[0].startswith("click_element("), actions
                assert "fail()" not in actions
                assert total == 0.0 and trace[-1]["terminated"], _describe(seed, total, trace)
        finally:
            env.close()
