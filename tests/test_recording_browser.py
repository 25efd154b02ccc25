"""Recorded MiniWoB++ oracle episodes replay exactly; the HTML viewer works in Chromium.

Three tasks (pixel clicks, element clicks, typing) are played by their scripted
oracles through real ``farm serve miniwob/<task> --record DIR`` processes, then
replayed in fresh sandboxes (in-process, and through ``farm replay --endpoint``)
and shown in the HTML viewer, loaded offline (file://) in Debian's Chromium via
Playwright. The viewer's screenshot is saved under ``tests/artifacts/`` (or
``$FARM_TEST_ARTIFACTS``) and its path printed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from typing import Any

import pytest

import farm
from env_adapters.browser.chromium import LAUNCH_ARGS
from env_adapters.browser.oracles import run_episode
from farm.cli import main as cli
from farm.recording import Episode, EpisodeStore
from farm.recording.replay import replay
from farm.recording.replay_env import DIVERGENCE_KEY, ReplayEnv
from farm.recording.viewer import write_html
from farm.server.process import ServerProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = list(LAUNCH_ARGS)  # the flags every sandbox browser gets
FRAMES_LOADED = (
    "Array.from(document.querySelectorAll('img.frame'))"
    ".every(i => i.complete && i.naturalWidth > 0)"
)
TASKS = {
    "miniwob/click-button-sequence": 2,  # pixel clicks: click(x, y)
    "miniwob/enter-text": 3,  # type_element + click_element
    "miniwob/click-checkboxes": 1,  # several click_element
}

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium is not at {CHROMIUM}"),
    pytest.mark.skipif(
        not all(importlib.util.find_spec(m) for m in ("playwright", "miniwob")),
        reason="the browser extra (playwright, miniwob) is not installed",
    ),
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: Any, sock_dir: str) -> dict[str, Any]:
    """One oracle episode per task, recorded by ``farm serve --record``."""
    root = str(tmp_path_factory.mktemp("episodes"))
    out: dict[str, Any] = {"root": root, "episodes": {}}
    for task, seed in TASKS.items():
        name = task.split("/")[1]
        with ServerProcess(
            task, address=f"unix://{sock_dir}/rec-{name}.sock", args=["--record", root]
        ) as srv:
            env = farm.connect(srv.address)
            trace: list[dict[str, Any]] = []
            total, _steps, actions = run_episode(env, task, seed, trace=trace)
            env.close()
        assert total == 1.0, (task, actions)
        out["episodes"][task] = {"actions": actions, "trace": trace, "seed": seed}
    store = EpisodeStore(root)
    for row in store.list():
        out["episodes"][row["env_id"]]["path"] = row["path"]
    return out


def test_recorded_oracle_episodes(recorded: dict[str, Any]) -> None:
    for task, rec in recorded["episodes"].items():
        ep = Episode(rec["path"])
        assert ep.complete and ep.outcome == "success", task
        assert ep.meta.seed == rec["seed"] and ep.meta.kind == "browser"
        assert ep.meta.versions.get("miniwob") and ep.meta.versions.get("playwright")
        assert [ep.action(i) for i in range(1, ep.num_steps + 1)] == rec["actions"]
        assert [s.reward for s in ep.steps[1:]] == [t["reward"] for t in rec["trace"]]
        assert not ep.missing_frames()
        assert ep.obs_field(0, "text").startswith("[1] ")


def test_replay_reproduces_rewards_and_text_views(recorded: dict[str, Any]) -> None:
    for task in ("miniwob/click-button-sequence", "miniwob/enter-text"):
        ep = Episode(recorded["episodes"][task]["path"])
        report = replay(ep)
        assert report.reproduced, (task, [(s.index, s.problems) for s in report.steps])
        assert len(report.steps) == ep.num_steps + 1
        assert all(s.text_match for s in report.steps)
        assert all(s.reward[0] == s.reward[1] for s in report.steps)
        assert all(d.ok for s in report.steps for d in s.images)


def test_farm_replay_against_an_endpoint(
    recorded: dict[str, Any], sock_dir: str, tmp_path: Any, capsys: Any
) -> None:
    task = "miniwob/click-checkboxes"
    path = recorded["episodes"][task]["path"]
    with ServerProcess(task, address=f"unix://{sock_dir}/replay-cb.sock") as srv:
        assert cli(["replay", path, "--endpoint", srv.address, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reproduced"] and report["target"].startswith("unix://")
    assert all(s["text_match"] for s in report["steps"])
    # a recording whose action was changed does not reproduce: exit code 1
    tampered = str(tmp_path / os.path.basename(path))
    import shutil

    shutil.copytree(path, tampered)
    steps_file = os.path.join(tampered, "steps.jsonl")
    with open(steps_file) as f:
        recs = [json.loads(x) for x in f]
    first = next(r for r in recs if r["type"] == "step")
    first["action"] = "wait(10)"
    with open(steps_file, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs))
    assert cli(["replay", tampered]) == 1
    out = capsys.readouterr().out
    assert "NOT reproduced" in out


def artifact_dir() -> str:
    path = os.environ.get("FARM_TEST_ARTIFACTS") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "artifacts"
    )
    os.makedirs(path, exist_ok=True)
    return path


def test_html_viewer_in_chromium(recorded: dict[str, Any], tmp_path: Any) -> None:
    from playwright.sync_api import sync_playwright

    task = "miniwob/enter-text"
    ep = Episode(recorded["episodes"]["miniwob/enter-text"]["path"])
    page_path = str(tmp_path / "viewer.html")
    write_html(page_path, ep)
    ep2 = Episode(recorded["episodes"]["miniwob/click-button-sequence"]["path"])
    page2 = str(tmp_path / "viewer2.html")
    write_html(page2, ep2, replay(ep2))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto("file://" + page_path)
            page.wait_for_function(FRAMES_LOADED)
            assert errors == []
            assert requests == ["file://" + page_path]  # offline: nothing else is fetched
            n = len(ep.steps)
            assert page.locator("section.step").count() == n
            sizes = page.eval_on_selector_all(
                "img.frame", "els => els.map(e => [e.naturalWidth, e.naturalHeight])"
            )
            assert sizes == [[160, 210]] * n  # every frame, decoded
            assert page.locator("#timeline img").count() == n
            actions = page.locator("code.action").all_inner_texts()
            assert actions == [ep.action(i) for i in range(1, n)]
            typed = re.search(r'type_element\((\d+), "(.*)"\)', actions[0])
            assert typed is not None
            # the element box of the typed-into field, from the text view, and the text
            box = page.locator(f"section#step-0 rect.marker-element[data-ref='{typed[1]}']")
            assert box.count() == 1
            assert typed[2] in page.locator("section#step-0 .caption").inner_text()
            assert page.locator("section#step-1 rect.marker-element").count() == 1
            # the text view on demand
            details = page.locator("section#step-0 details.textview")
            assert not details.evaluate("d => d.open")
            details.locator("summary").click()
            assert details.locator("pre").inner_text() == ep.obs_field(0, "text")
            assert page.locator("#outcome").inner_text() == "success"
            rewards = page.locator(".kv .reward").all_inner_texts()
            assert [float(r) for r in rewards] == [s.reward for s in ep.steps[1:]]
            shot = os.path.join(artifact_dir(), "recording_viewer_enter_text.png")
            page.screenshot(path=shot, full_page=True)
            # the pixel-click episode: click markers at the recorded coordinates
            page.goto("file://" + page2)
            page.wait_for_function(FRAMES_LOADED)
            clicks = [
                tuple(int(v) for v in re.findall(r"-?\d+", a))
                for a in (ep2.action(i) for i in range(1, len(ep2.steps)))
            ]
            drawn = page.eval_on_selector_all(
                "circle.marker-click",
                "els => els.map(e => [+e.getAttribute('cx'), +e.getAttribute('cy')])",
            )
            assert [tuple(d) for d in drawn] == clicks and len(clicks) == 2
            assert page.locator("#verdict").inner_text() == "replay: reproduced"
            page.locator("#timeline a[data-step='1']").click()
            assert page.locator("section#step-1.selected").count() == 1
            shot2 = os.path.join(artifact_dir(), "recording_viewer_click_sequence.png")
            page.screenshot(path=shot2, full_page=True)
        finally:
            browser.close()
    assert os.path.getsize(shot) > 10_000 and os.path.getsize(shot2) > 10_000
    print(f"\nviewer screenshots: {shot} {shot2}")
    del task


def test_replay_env_with_gui_actions(recorded: dict[str, Any]) -> None:
    ep = Episode(recorded["episodes"]["miniwob/click-checkboxes"]["path"])
    env = ReplayEnv(ep.path)
    obs, _ = env.reset()
    assert obs["text"] == ep.obs_field(0, "text")
    first = ep.action(1)
    spaced = first.replace("(", "( ").replace(")", " )")  # same action, other spelling
    obs, reward, terminated, truncated, info = env.step(spaced)
    assert info["farm.replay.match"] and not truncated and not terminated
    assert obs["text"] == ep.obs_field(1, "text") and reward == ep.steps[1].reward
    _, _, _, truncated, info = env.step("click(1, 1)")
    assert truncated and info[DIVERGENCE_KEY]["expected"] == ep.action(2)
