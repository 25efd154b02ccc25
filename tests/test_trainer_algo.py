"""The trainer's algorithm as pure logic: staleness control (property-based over random
completion orders), mini-group collection, STEPO/GRPO/GiGPO advantages, the decoupled
loss and its log-prob check, the DTAC curriculum."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.algo.advantages import discounted_returns, group_advantages, step_advantages
from trainer.algo.curriculum import Curriculum, CurriculumConfig
from trainer.algo.groups import GroupCollector, Verdict
from trainer.algo.staleness import StalenessController, feasible
from trainer.api.types import Group, Step, Trajectory
from trainer.errors import LogprobMismatchError, StalenessError

torch = pytest.importorskip("torch")


def traj(ret: float, n: int = 1, version: int = 0, anchors: list[str] | None = None) -> Trajectory:
    steps = [
        Step(None, None, "click_element(1)", -1.0, version, 0.0, (anchors or [""] * n)[i])
        for i in range(n)
    ]
    steps[-1].reward = ret
    return Trajectory("t", 0, steps, terminated=True)


# ---------------------------------------------------------------- staleness


def simulate(eta: int, batch: int, max_running: int, rng: random.Random, steps: int) -> dict:
    """Random interleavings of admissions, completions (in any order, some groups
    very slow), drops and learner steps; checks the bound at every consumption."""
    ctl: StalenessController[tuple[int, int]] = StalenessController(eta, batch, max_running)
    running: dict[int, int] = {}  # gid -> version its rollouts started acting with
    gid, worst, trained, training = 0, 0, 0, False
    for _ in range(steps):
        moves = []
        if ctl.can_admit():
            moves.append("admit")
        if running:
            moves += ["finish"] * 3 + ["drop"]
        if not training and ctl.batch_ready():
            moves.append("take")
        if training:
            moves.append("publish")
        assert moves, "deadlock: nothing can happen"
        move = rng.choice(moves)
        if move == "admit":
            v = ctl.admit(gid)
            running[gid] = v
            gid += 1
        elif move in ("finish", "drop"):
            # skewed: old groups are often the slow ones
            g = rng.choice(
                sorted(running)[: max(1, len(running) // 3)]
                if rng.random() < 0.3
                else list(running)
            )
            acted = running.pop(g)
            # its steps were acted by versions in [admission version, current version]
            min_version = rng.randint(acted, ctl.version)
            if move == "finish":
                ctl.finish(g, (g, min_version))
            else:
                ctl.drop(g)
        elif move == "take":
            step = ctl.next_step
            for _, min_version in ctl.take_batch():
                worst = max(worst, step - min_version)
            trained += 1
            training = True
        else:
            ctl.publish(ctl.next_step)
            training = False
    return {"worst": worst, "trained": trained}


@settings(max_examples=200, deadline=None)
@given(
    eta=st.integers(0, 5),
    batch=st.integers(1, 4),
    max_running=st.integers(1, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_staleness_never_exceeds_eta_over_random_completion_orders(eta, batch, max_running, seed):
    out = simulate(eta, batch, max_running, random.Random(seed), 400)
    assert out["worst"] <= eta


def test_staleness_bound_is_tight_and_async_trains_while_groups_run():
    # with eta = 3, the worst staleness seen over many runs reaches the bound
    worst = max(simulate(3, 2, 8, random.Random(s), 600)["worst"] for s in range(20))
    assert worst == 3


def test_eta_zero_is_synchronous():
    ctl: StalenessController[int] = StalenessController(0, 2, 10)
    ctl.admit(0)
    ctl.admit(1)
    assert not ctl.can_admit()  # one batch per version
    ctl.finish(0, 0)
    assert not ctl.batch_ready()
    ctl.finish(1, 1)
    assert ctl.take_batch() == [0, 1]
    assert not ctl.can_admit()  # nothing starts while the learner trains
    ctl.publish(1)
    assert ctl.can_admit()


def test_admission_matches_the_familiar_bound_when_the_learner_is_idle():
    eta, b = 2, 3
    ctl: StalenessController[int] = StalenessController(eta, b, 100)
    n = 0
    while ctl.can_admit():
        ctl.admit(n)
        n += 1
    assert n == (eta + 0 + 1) * b  # accepted + running < (eta + v + 1) * B


def test_a_straggler_holds_the_batch_when_its_deadline_comes():
    ctl: StalenessController[str] = StalenessController(1, 1, 10)
    ctl.admit(0)  # deadline 1
    ctl.admit(1)  # deadline 1
    ctl.finish(1, "b")
    assert ctl.take_batch() == ["b"]
    ctl.publish(1)
    ctl.admit(2)  # deadline 2
    ctl.finish(2, "c")
    # step 1 must train group 0 (deadline 1): c is ready but may not jump ahead
    assert not ctl.batch_ready()
    ctl.finish(0, "a")
    assert ctl.take_batch() == ["a"]


def test_feasible():
    assert feasible([0, 0], 0, 2)
    assert not feasible([0, 0, 0], 0, 2)
    assert feasible([0, 0, 1, 1], 0, 2)
    assert not feasible([0], 1, 2)


def test_staleness_errors_and_checkpoint_state():
    with pytest.raises(ValueError, match="eta"):
        StalenessController(-1, 1, 1)
    ctl: StalenessController[int] = StalenessController(0, 1, 1)
    ctl.admit(0)
    with pytest.raises(StalenessError):
        ctl.admit(1)
    with pytest.raises(StalenessError):
        ctl.take_batch()
    ctl.finish(0, 0)
    ctl.take_batch()
    ctl.publish(1)
    state = ctl.state()
    other: StalenessController[int] = StalenessController(0, 1, 1)
    other.load_state(state)
    assert other.version == 1 and other.next_step == 1 and other.can_admit()


# ---------------------------------------------------------------- mini-group batching


def test_group_collector_keeps_first_g_relaunches_infra_and_drops_zero_variance():
    g = Group(0, "t", 0, 0)
    coll = GroupCollector(g, size=3, redundancy=2, max_relaunches=1)
    assert coll.launches() == 5
    assert coll.on_finished(traj(1.0)) is Verdict.WAIT
    cut = traj(0.0)
    cut.infra_error = "sandbox died"
    assert coll.on_finished(cut) is Verdict.RELAUNCH
    assert coll.on_finished(traj(0.0)) is Verdict.WAIT
    assert coll.on_finished(traj(1.0)) is Verdict.COMPLETE
    assert coll.on_finished(traj(1.0)) is Verdict.SURPLUS
    assert len(g.trajectories) == 3 and cut not in g.trajectories

    z = GroupCollector(Group(1, "t", 0, 0), size=2)
    z.on_finished(traj(1.0))
    assert z.on_finished(traj(1.0)) is Verdict.ZERO_VARIANCE

    f = GroupCollector(Group(2, "t", 0, 0), size=2, max_relaunches=0)
    bad = traj(0.0)
    bad.infra_error = "x"
    assert f.on_finished(bad) is Verdict.FAILED


def test_replayed_member_counts_towards_the_group():
    coll = GroupCollector(Group(0, "t", 0, 0), size=4, redundancy=1)
    coll.add_replay(traj(1.0))
    assert coll.launches() == 4  # 3 fresh + 1 redundant


# ---------------------------------------------------------------- advantages


@given(
    lengths=st.lists(st.integers(1, 30), min_size=2, max_size=8),
    rewards=st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=8, max_size=8),
)
def test_stepo_keeps_group_balance_after_decomposition(lengths, rewards):
    g = Group(
        0, "t", 0, 0, trajectories=[traj(r, n) for n, r in zip(lengths, rewards, strict=False)]
    )
    aw = step_advantages([g], "stepo")
    assert len(aw) == sum(lengths)
    total = sum(a * w for a, w in aw)
    assert abs(total) < 1e-9
    # each trajectory weighs 1/N whatever its length
    i = 0
    for t in g.trajectories:
        assert abs(sum(w for _, w in aw[i : i + len(t)]) - 1 / len(lengths)) < 1e-12
        i += len(t)


def test_grpo_decomposition_is_imbalanced_when_lengths_differ():
    g = Group(0, "t", 0, 0, trajectories=[traj(1.0, 1), traj(0.0, 9)])
    stepo = sum(a * w for a, w in step_advantages([g], "stepo"))
    grpo = sum(a * w for a, w in step_advantages([g], "grpo"))
    assert abs(stepo) < 1e-9
    assert grpo < -0.5  # the long failure swamps the short success


def test_group_advantages_and_returns():
    assert group_advantages([1.0, 0.0], normalize_std=False) == [0.5, -0.5]
    a = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert abs(a[0] - 1.0) < 1e-4 and abs(sum(a)) < 1e-9
    assert discounted_returns([0.0, 0.0, 1.0], 0.5) == [0.25, 0.5, 1.0]


def test_gigpo_adds_anchor_state_advantages():
    # both trajectories pass through anchor "s": the one that then succeeds gets more
    good = traj(1.0, 2, anchors=["a", "s"])
    bad = traj(0.0, 2, anchors=["b", "s"])
    g = Group(0, "t", 0, 0, trajectories=[good, bad])
    stepo = step_advantages([g], "stepo")
    gigpo = step_advantages([g], "gigpo", omega=1.0)
    assert gigpo[0] == stepo[0]  # anchors "a"/"b" are seen once: no step term
    assert gigpo[1][0] > stepo[1][0] and gigpo[3][0] < stepo[3][0]


# ---------------------------------------------------------------- loss


def test_ppo_loss_clips_around_the_proximal_policy_and_truncates_behaviour_weights():
    from trainer.algo.loss import LossConfig, ppo_loss

    cfg = LossConfig(clip_low=0.2, clip_high=0.2, iw_cap=2.0)
    prox = torch.zeros(3)
    cur = torch.tensor([0.0, 1.0, -1.0], requires_grad=True)  # ratios 1, e, 1/e
    beh = torch.tensor([0.0, 0.0, -5.0])  # iw 1, 1, e^5 -> capped at 2
    adv = torch.tensor([1.0, 1.0, -1.0])
    w = torch.ones(3)
    loss, stats = ppo_loss(cur, prox, beh, adv, w, cfg)
    expected = -(
        1.0 * 1.0 + 1.0 * 1.2 + 1.0 * -torch.exp(torch.tensor(-1.0)).clamp(0.8) * 2.0 / 1.0
    )
    assert abs(float(loss.detach()) - float(expected)) < 1e-5
    assert stats["iw_truncated_fraction"] == pytest.approx(1 / 3)
    loss.backward()
    assert cur.grad[1] == 0  # clipped: no gradient beyond 1 + eps


def test_logprob_check_fails_loudly():
    from trainer.algo.loss import check_logprobs

    lp = torch.tensor([-0.5, -1.0, -2.0, -0.7, -1.5])
    versions = torch.tensor([0, 0, 0, 0, 0])
    # stale samples whose behaviour log-probs equal the learner's: weights never synced
    with pytest.raises(LogprobMismatchError, match="not receiving new weights"):
        check_logprobs(lp, lp.clone(), versions, learner_version=2)
    # fresh samples that disagree: acting and learning compute differently
    with pytest.raises(LogprobMismatchError, match="do not compute the same"):
        check_logprobs(lp, lp + 0.1, versions, learner_version=0)
    stats = check_logprobs(lp, lp + 1e-6, versions, learner_version=0)
    assert stats["logprob_gap_fresh_max"] < 1e-5
    check_logprobs(lp, lp + 0.05, versions, learner_version=1)  # stale and moved: fine


# ---------------------------------------------------------------- curriculum


@given(share=st.floats(0.0, 0.5), seed=st.integers(0, 10_000), n=st.integers(1, 400))
@settings(max_examples=60, deadline=None)
def test_infeasible_share_stays_within_its_bound(share, seed, n):
    cur = Curriculum(["a", "b"], ["x"], CurriculumConfig(infeasible_share=share), seed=seed)
    for _ in range(n):
        pick = cur.next_group()
        assert cur.n_infeasible <= share * cur.n_groups + 1e-9
        assert pick.feasible == (pick.stream != "infeasible")


def test_curriculum_bands_replay_and_state():
    cfg = CurriculumConfig(min_attempts=4, replay_share=1.0, infeasible_share=0.0)
    cur = Curriculum(["easy", "hard"], seed=1, cfg=cfg)
    win = traj(1.0)
    win.task, win.seed = "hard", 77
    cur.update(win)
    for _ in range(20):
        for task, ok in (("easy", True), ("hard", False)):
            t = traj(1.0 if ok else 0.0)
            t.task = task
            cur.update(t)
    assert cur.band_of("easy") == "mastered" and cur.band_of("hard") == "hard"
    pick = cur.next_group()
    assert pick.stream == "replay" and pick.task == "hard" and pick.seed == 77
    assert pick.replay is win
    snap = cur.snapshot()
    assert snap["pass_rate"]["easy"] > 0.9 and snap["mix"] == {"replay": 1.0}
    other = Curriculum(["easy", "hard"], seed=5, cfg=cfg)
    other.load_state(cur.state())
    assert other.snapshot() == snap
    assert other.next_group().seed == cur.next_group().seed  # the rng travels too


def test_learnable_tasks_get_most_groups():
    cfg = CurriculumConfig(min_attempts=4, replay_share=0.0, infeasible_share=0.0)
    cur = Curriculum(["easy", "mid"], seed=3, cfg=cfg)
    for i in range(40):
        for task, ok in (("easy", True), ("mid", i % 2 == 0)):
            t = traj(1.0 if ok else 0.0)
            t.task = task
            cur.update(t)
    picks = [cur.next_group().task for _ in range(400)]
    assert picks.count("mid") > 0.8 * len(picks)
