"""The text-pointer policy: features of the text view, actions it emits, log-probs that
the learner recomputes exactly whatever the batch, the exploration mixture, weights."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install farm[train])")

from env_adapters.gui import actions as A  # noqa: E402
from env_adapters.gui.textview import parse_text_view  # noqa: E402
from trainer.policies import make_policy  # noqa: E402
from trainer.policies.features import ELEMENT_FEATURES, candidates_of, encode  # noqa: E402
from trainer.policies.text_pointer import TextPointerPolicy  # noqa: E402

pytestmark = pytest.mark.train
SHOT = np.zeros((210, 160, 3), np.uint8)
ENTER = {
    "instruction": 'Enter "Agustina" into the text field and press Submit.',
    "text": "\n".join(
        [
            '[1] div "Enter \\"Agustina\\" into the text field and press Submit." @(0,0,160,50)',
            '[2] span "Agustina" @(33,3,43,11)',
            '[3] textbox "" value="" @(2,53,128,21)',
            '[4] button "Submit" @(2,85,95,31)',
        ]
    ),
    "screenshot": SHOT,
}
BUTTONS = {
    "instruction": 'Click on the "okay" button.',
    "text": '[1] div "Click on the \\"okay\\" button." @(0,0,160,50)\n'
    '[7] button "okay" @(2,63,44,21)\n[9] button "next" @(2,105,41,21)',
    "screenshot": SHOT,
}


def test_text_view_parsing_and_features() -> None:
    els = parse_text_view(ENTER["text"] + '\n  [5] checkbox "A" value="checked" focused @(1,2,3,4)')
    assert [e.ref for e in els] == [1, 2, 3, 4, 5]
    assert els[2].value == "" and els[4].focused and els[4].depth == 1
    enc = encode(ENTER, vocab=1024, max_elements=48, max_candidates=16)
    f = {name: enc.elem_feats[:, i] for i, name in enumerate(ELEMENT_FEATURES)}
    assert f["is_instruction"].tolist() == [1, 0, 0, 0]
    assert f["inside_instruction"].tolist() == [0, 1, 0, 0]
    assert f["name_is_quoted"].tolist() == [0, 1, 0, 0]
    assert f["value_empty"].tolist() == [0, 0, 1, 0]
    assert enc.can_type.tolist() == [False, False, True, False]
    assert candidates_of(ENTER["instruction"], 16)[0] == "Agustina"


def test_actions_are_valid_and_logprobs_match_any_batch_composition() -> None:
    pol = TextPointerPolicy(seed=3)
    obs = [ENTER, BUTTONS] * 8
    outs = pol.act(obs)
    for out in outs:
        A.parse_action(out.action)  # every emitted action parses
        assert out.version == 0 and out.logprob == pytest.approx(out.policy_logprob)
    # recompute in another order and with other company (other padding)
    order = list(reversed(range(len(outs))))
    lp = pol.logprobs([outs[i].context for i in order], [outs[i].choice for i in order]).detach()
    for j, i in enumerate(order):
        assert float(lp[j]) == pytest.approx(outs[i].logprob, abs=1e-5)
    alone = pol.logprobs([outs[1].context], [outs[1].choice])
    assert float(alone[0]) == pytest.approx(outs[1].logprob, abs=1e-5)
    # the untrained policy is close to uniform over its options; fail() is less likely
    assert all(out.logprob > math.log(1 / 20) - 3 for out in outs)


def test_greedy_and_the_exploration_mixture() -> None:
    pol = TextPointerPolicy(seed=1)
    a = pol.act([BUTTONS] * 4, greedy=True)
    assert len({o.action for o in a}) == 1
    mixed = pol.act([BUTTONS] * 64, explore=[1.0] * 64)
    # uniform over click 1 / 7 / 9 and fail(): behaviour log-prob log(1/4), pi's differs
    assert all(o.logprob == pytest.approx(math.log(1 / 4), abs=1e-5) for o in mixed)
    assert any(abs(o.policy_logprob - o.logprob) > 1e-3 for o in mixed)
    assert {o.action for o in mixed} >= {"click_element(7)", "click_element(9)"}


def test_weights_move_between_copies_with_their_version() -> None:
    a, b = make_policy("text-pointer", seed=0), make_policy("text-pointer", seed=5)
    out = a.act([ENTER])[0]
    b.set_weights(a.get_weights(), 7)
    assert b.version == 7
    assert float(b.logprobs([out.context], [out.choice])[0]) == pytest.approx(out.logprob, abs=1e-6)


def test_unknown_policies_and_actions_are_refused() -> None:
    from trainer.errors import JobSpecError

    with pytest.raises(JobSpecError, match="unknown policy 'x'"):
        make_policy("x")
    with pytest.raises(JobSpecError, match="cannot import"):
        make_policy("nowhere.module:Policy")
    with pytest.raises(ValueError, match="cannot emit"):
        TextPointerPolicy(actions=("scroll",))


def test_gradient_accumulation_equals_one_full_batch_update() -> None:
    from trainer.api.spec import AlgorithmSpec, OptimizerSpec
    from trainer.api.types import Group, Step, Trajectory
    from trainer.infra.learner import Learner

    def groups(pol: TextPointerPolicy) -> list[Group]:
        out = []
        for gid, obs in enumerate([ENTER, BUTTONS, ENTER]):
            trajs = []
            for r in (1.0, 0.0, 0.0):
                acts = pol.act([obs, obs])
                steps = [Step(a.context, a.choice, a.action, a.logprob, 0) for a in acts]
                steps[-1].reward = r
                trajs.append(Trajectory("t", gid, steps, terminated=True))
            out.append(Group(gid, "t", gid, 0, trajectories=trajs))
        return out

    results = []
    for minibatches, accum in ((1, False), (3, True), (3, False)):
        pol = TextPointerPolicy(seed=4)
        algo = AlgorithmSpec(
            ppo_epochs=1, minibatches=minibatches, grad_accum=accum, entropy_coef=0
        )
        learner = Learner(pol, OptimizerSpec(name="sgd", lr=0.5, max_grad_norm=1e9), algo)
        torch.manual_seed(0)
        learner.train_step(groups(TextPointerPolicy(seed=4)))
        results.append(torch.cat([p.detach().flatten() for p in pol.parameters()]))
    full, accumulated, separate = results
    assert torch.allclose(full, accumulated, atol=1e-6)
    assert not torch.allclose(full, separate, atol=1e-6)  # three updates move differently
