"""``farm serve desktop/<task>`` end to end on real Xvfb: gymnasium conformance, every
scripted oracle through the gRPC endpoint, infeasible tasks, two desktops side by side,
and bad input over the wire.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from env_adapters.desktop.display import missing_prerequisites

pytestmark = pytest.mark.desktop

# fail (not skip) saying what to install when a prerequisite is missing
if (_missing := missing_prerequisites()) is not None:
    pytest.fail(_missing, pytrace=False)

from gymnasium.utils.env_checker import check_env  # noqa: E402

import farm  # noqa: E402
from env_adapters.desktop.oracles import (  # noqa: E402
    INFEASIBLE_ORACLES,
    ORACLES,
    OracleError,
    parse_windows,
    run_episode,
)
from env_adapters.desktop.tasks import FEASIBLE, INFEASIBLE  # noqa: E402
from farm.server.process import ServerProcess  # noqa: E402

SEEDS = (0, 1)


def _describe(seed: int, total: float, trace: list[dict[str, Any]], error: str = "") -> str:
    steps = [
        f"{t['action']} -> r={t['reward']:+.2f} term={t['terminated']} trunc={t['truncated']} "
        f"info={json.dumps(t['info'], default=str)}"
        for t in trace
    ]
    return f"seed {seed}: total {total:+.2f} {error}\n    " + "\n    ".join(steps)


def test_every_task_has_an_oracle() -> None:
    assert set(ORACLES) == set(FEASIBLE) and set(INFEASIBLE_ORACLES) == set(INFEASIBLE)


def test_served_env_passes_check_env(sock_path) -> None:
    with ServerProcess("desktop/calc-add", address=sock_path("desk-check")) as srv:
        remote = farm.connect(srv.address)
        try:
            check_env(remote, skip_render_check=True)
            assert remote.observation_space["screenshot"].shape == (720, 1280, 3)
            assert remote.metadata["farm.task"] == "desktop/calc-add"
            assert remote.metadata["farm.kind"] == "desktop"
        finally:
            remote.close()


@pytest.mark.parametrize("task", sorted(ORACLES))
@pytest.mark.timeout(120)
def test_oracle_solves_the_task_through_grpc(task: str, sock_path) -> None:
    failures = []
    with ServerProcess(task, address=sock_path("desk-oracle")) as srv:
        env = farm.connect(srv.address)
        try:
            for seed in SEEDS:
                trace: list[dict[str, Any]] = []
                total, error = 0.0, ""
                try:
                    total, _, _ = run_episode(env, task, seed, trace=trace)
                except OracleError as e:
                    error = f"oracle error: {e}"
                last = trace[-1] if trace else {}
                if error or total != 1.0 or not last.get("terminated"):
                    failures.append(_describe(seed, total, trace, error))
                # a wrong answer earns 0: declare done() at once on a fresh episode
                env.reset(seed=seed)
                _, reward, terminated, _, info = env.step("done()")
                if reward != 0.0 or not terminated:
                    failures.append(f"seed {seed}: done() at once earned {reward} ({info})")
        finally:
            env.close()
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("task", sorted(INFEASIBLE_ORACLES))
def test_infeasible_task_rewards_only_fail(task: str, sock_path) -> None:
    with ServerProcess(task, address=sock_path("desk-inf")) as srv:
        env = farm.connect(srv.address)
        try:
            _obs, info = env.reset(seed=0)
            assert info["feasible"] is False
            _, reward, terminated, _, _ = env.step("fail()")
            assert (reward, terminated) == (1.0, True)
            env.reset(seed=0)
            env.step("click(640, 360)")
            _, reward, terminated, _, _ = env.step("done()")
            assert (reward, terminated) == (0.0, True)
        finally:
            env.close()


def _home(obs: dict[str, Any]) -> Path:
    """The sandbox's home, from a terminal-create-file instruction."""
    path = obs["instruction"].split("Create the file ")[1].split(" ")[0]
    return Path(path.rsplit("/notes/", 1)[0])


def _run_in_terminal(env: Any, command: str, marker: str) -> dict[str, Any]:
    """Type a shell command that ends by titling the terminal ``marker``; wait for it."""
    obs, *_ = env.step(
        "type(" + json.dumps(f"{command}; printf '\\033]0;%s\\007' {marker}\n") + ")"
    )
    deadline = time.monotonic() + 10
    while f'"{marker}"' not in obs["text"] and time.monotonic() < deadline:
        obs, *_ = env.step("wait(100)")
    assert f'"{marker}"' in obs["text"], obs["text"]
    return obs


def test_two_desktops_side_by_side_are_isolated(sock_path) -> None:
    task = "desktop/terminal-create-file"
    with (
        ServerProcess(task, address=sock_path("desk-a")) as a,
        ServerProcess(task, address=sock_path("desk-b")) as b,
    ):
        env_a, env_b = farm.connect(a.address), farm.connect(b.address)
        try:
            obs_a, _ = env_a.reset(seed=0)
            obs_b, _ = env_b.reset(seed=0)
            meta_a, meta_b = json.loads(obs_a["metadata"]), json.loads(obs_b["metadata"])
            assert meta_a["display"] != meta_b["display"]
            home_a, home_b = _home(obs_a), _home(obs_b)
            assert home_a != home_b
            # a window opened in a shows up in a's text view only
            obs_a = _run_in_terminal(env_a, "(xterm -T only-in-a &); sleep 1", "a-ready")
            obs_b, *_ = env_b.step("wait(10)")
            assert [w.title for w in parse_windows(obs_a["text"])].count("only-in-a") == 1
            assert [w.title for w in parse_windows(obs_b["text"])] == ["xterm"]
            # ~ is each sandbox's own home
            _run_in_terminal(env_a, "echo from-a > ~/mine.txt", "a-done")
            _run_in_terminal(env_b, "echo from-b > ~/mine.txt", "b-done")
            assert (home_a / "mine.txt").read_text() == "from-a\n"
            assert (home_b / "mine.txt").read_text() == "from-b\n"
            # both still solve their tasks, interleaved; a's reset removes its extra window
            assert run_episode(env_a, task, 1)[0] == 1.0
            assert run_episode(env_b, task, 2)[0] == 1.0
        finally:
            env_a.close()
            env_b.close()


def test_bad_input_over_grpc_keeps_the_session(sock_path) -> None:
    with ServerProcess("desktop/terminal-chmod", address=sock_path("desk-bad")) as srv:
        env = farm.connect(srv.address)
        try:
            env.reset(seed=0)
            _, _, _, _, info = env.step("click(99999, 3)")
            assert "outside the 1280x720 screen" in info["action_error"]
            _, _, _, _, info = env.step('key("ctrl+alt+warp")')
            assert "unknown key 'warp'" in info["action_error"]
            total, _, _ = run_episode(env, "desktop/terminal-chmod", 0)
            assert total == 1.0
        finally:
            env.close()
