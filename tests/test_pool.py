"""EnvPool / AsyncEnvPool over real servers: batching, completion order, autoreset, errors."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import health

import farm
from env_adapters.toy import solve_instruction
from farm.errors import ConfigError, FarmError, InvalidArgumentError
from farm.server.process import ServerProcess


def by_env(result: tuple) -> tuple:
    """A pool result reordered by env id (recv returns envs in completion order)."""
    obs, rew, term, trunc, info = result
    order = np.argsort(info["env_id"])
    if isinstance(obs, dict):
        obs = {k: tuple(v[i] for i in order) for k, v in obs.items()}
    else:
        obs = obs[order]
    infos = [info["infos"][i] for i in order]
    return (
        obs,
        rew[order],
        term[order],
        trunc[order],
        {"env_id": info["env_id"][order], "infos": infos},
    )


def _latency(median_s: float, episode_length: int = 200) -> str:
    return json.dumps({"dist": "constant", "median_s": median_s, "episode_length": episode_length})


@pytest.fixture(scope="module")
def fast_and_slow() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two toy/latency servers: constant 0.01 s steps and constant 0.2 s steps."""
    with (
        ServerProcess("toy/latency", env_kwargs=_latency(0.01)) as fast,
        ServerProcess("toy/latency", env_kwargs=_latency(0.2)) as slow,
    ):
        yield fast, slow


@pytest.fixture(scope="module")
def short_episodes() -> Iterator[ServerProcess]:
    with ServerProcess("toy/latency", env_kwargs=_latency(0.0, episode_length=3)) as srv:
        yield srv


def test_reset_send_recv(fast_and_slow: tuple[ServerProcess, ServerProcess]) -> None:
    fast, slow = fast_and_slow
    with farm.EnvPool([fast.address, slow.address], num_envs=8, batch_size=4) as pool:
        assert (pool.num_envs, pool.batch_size) == (8, 4)
        # round-robin over the two endpoints
        assert health(fast.address).active_sessions == 4
        assert health(slow.address).active_sessions == 4
        obs, info = pool.reset(seed=0)
        assert obs.shape == (8, 4) and obs.dtype == np.float32
        assert info["env_id"].tolist() == list(range(8))
        assert len(info["infos"]) == 8
        assert len({tuple(o) for o in obs.tolist()}) == 8  # env i is seeded with 0 + i
        again, _ = pool.reset(seed=0)
        assert np.array_equal(obs, again)

        pool.send(np.ones(8, np.int64), np.arange(8))
        seen = []
        for _ in range(2):
            obs, rew, term, trunc, info = pool.recv()
            ids = info["env_id"]
            assert obs.shape == (4, 4) and rew.shape == term.shape == trunc.shape == (4,)
            assert set(ids.tolist()) <= set(range(8)) and len(set(ids.tolist())) == 4
            assert not term.any() and not trunc.any()
            assert set(rew.tolist()) <= {0.0, 1.0}
            assert all(i["delay_s"] in (0.01, 0.2) for i in info["infos"])
            seen += ids.tolist()
        assert sorted(seen) == list(range(8))
        with pytest.raises(FarmError, match=r"recv\(4\) but only 0 env\(s\) were sent"):
            pool.recv()


def test_results_come_in_completion_order(
    fast_and_slow: tuple[ServerProcess, ServerProcess],
) -> None:
    fast, slow = fast_and_slow
    with farm.EnvPool([fast.address, slow.address], num_envs=8, batch_size=4) as pool:
        pool.reset(seed=1)
        for _ in range(2):
            start = time.monotonic()
            pool.send(np.zeros(8, np.int64))  # default: all envs
            _, _, _, _, info = pool.recv()
            first = time.monotonic() - start
            # envs 0, 2, 4, 6 live on the fast server (0.01 s), the others on the slow one
            assert sorted(info["env_id"].tolist()) == [0, 2, 4, 6]
            assert {i["delay_s"] for i in info["infos"]} == {0.01}
            assert first < 0.19, f"the fast batch waited for the slow envs ({first:.3f} s)"
            _, _, _, _, info = pool.recv(4)
            assert sorted(info["env_id"].tolist()) == [1, 3, 5, 7]
            assert {i["delay_s"] for i in info["infos"]} == {0.2}

        # a policy that only waits for the fast envs keeps stepping them while the slow
        # ones are still busy
        pool.send(np.zeros(8, np.int64))
        fast_steps = 0
        ids = pool.recv(4)[4]["env_id"]
        for _ in range(5):
            pool.send(np.zeros(4, np.int64), ids)
            ids = pool.recv(4)[4]["env_id"]
            fast_steps += 4
        assert sorted(ids.tolist()) == [0, 2, 4, 6] and fast_steps == 20
        _, _, _, _, info = pool.recv(4)
        assert sorted(info["env_id"].tolist()) == [1, 3, 5, 7]


def test_autoreset_next_step(short_episodes: ServerProcess) -> None:
    with farm.EnvPool([short_episodes.address], num_envs=2, autoreset="next_step") as pool:
        pool.reset(seed=0)
        for t in (1, 2, 3):
            obs, rew, term, trunc, info = pool.step(np.ones(2, np.int64), [0, 1])
            assert trunc.tolist() == [t == 3] * 2 and not term.any()
            assert all("final_obs" not in i for i in info["infos"])
        # the next send resets (the action is ignored): reward 0, flags False, reset info
        obs, rew, term, trunc, info = pool.step(np.ones(2, np.int64), [0, 1])
        assert rew.tolist() == [0.0, 0.0]
        assert not term.any() and not trunc.any()
        assert info["infos"] == [{}, {}]  # reset's info, not a step's {"delay_s": ...}
        assert obs.shape == (2, 4)
        # then a new episode of 3 steps
        for t in (1, 2, 3):
            _, _, term, trunc, info = pool.step(np.zeros(2, np.int64), [0, 1])
            assert trunc.tolist() == [t == 3] * 2
            assert all("delay_s" in i for i in info["infos"])


def test_autoreset_next_step_text_task(text_server: ServerProcess) -> None:
    with farm.EnvPool([text_server.address], num_envs=3, autoreset="next_step") as pool:
        obs, _ = pool.reset(seed=10)
        plans = [solve_instruction(ins) for ins in obs["instruction"]]
        # env 0 types a wrong letter (terminates at once), the others spell correctly
        wrong = (plans[0][0] + 1) % 26
        obs, rew, term, trunc, info = by_env(pool.step([wrong, plans[1][0], plans[2][0]]))
        assert term.tolist() == [True, False, False] and rew.tolist() == [0.0, 0.0, 0.0]
        assert info["infos"][0] == {"correct": False}
        obs, rew, term, trunc, info = by_env(pool.step([0, plans[1][1], plans[2][1]]))
        assert obs["typed"][0] == "" and set(info["infos"][0]) == {"mode", "length"}
        assert rew[0] == 0.0 and not term[0] and not trunc[0]
        assert [len(t) for t in obs["typed"][1:]] == [2, 2]


def test_autoreset_same_step(text_server: ServerProcess, short_episodes: ServerProcess) -> None:
    with farm.EnvPool([text_server.address], num_envs=2, autoreset="same_step") as pool:
        obs, _ = pool.reset(seed=20)
        plans = [solve_instruction(ins) for ins in obs["instruction"]]
        instructions = obs["instruction"]
        n = min(len(p) for p in plans)
        for k in range(n):
            obs, rew, term, trunc, info = by_env(pool.step([plans[0][k], plans[1][k]], [0, 1]))
            if k < n - 1:
                assert not term.any()
        done = [i for i in (0, 1) if len(plans[i]) == n]
        for i in done:
            # reward and flags of the final step; obs of the new episode; the final obs in info
            assert term[i] and rew[i] == 1.0
            assert obs["typed"][i] == ""
            final = info["infos"][i]
            assert final["final_obs"]["typed"] == "".join(chr(ord("a") + a) for a in plans[i])
            assert final["final_obs"]["instruction"] == instructions[i]
            assert final["final_info"] == {"correct": True}
            assert {"mode", "length"} <= set(final)
        # the next step belongs to the new episode: no reset step in between
        new_plan = solve_instruction(obs["instruction"][done[0]])
        actions = [0, 0]
        actions[done[0]] = new_plan[0]
        obs, rew, term, trunc, info = by_env(pool.step(actions, [0, 1]))
        assert obs["typed"][done[0]] == chr(ord("a") + new_plan[0])
        assert "final_obs" not in info["infos"][done[0]]

    with farm.EnvPool([short_episodes.address], num_envs=2, autoreset="same_step") as pool:
        pool.reset(seed=0)
        for _ in range(3):
            obs, rew, term, trunc, info = pool.step(np.ones(2, np.int64))
        assert trunc.all() and not term.any() and obs.shape == (2, 4)
        assert all(i["final_info"]["delay_s"] == 0.0 for i in info["infos"])
        assert all(np.asarray(i["final_obs"]).shape == (4,) for i in info["infos"])
        # the new episode is 3 steps long again
        for t in (1, 2, 3):
            _, _, _, trunc, info = pool.step(np.ones(2, np.int64))
            assert trunc.tolist() == [t == 3] * 2


def test_invalid_action_names_the_env(fast_and_slow: tuple[ServerProcess, ServerProcess]) -> None:
    fast, slow = fast_and_slow
    with farm.EnvPool([fast.address, slow.address], num_envs=4, batch_size=2) as pool:
        pool.reset(seed=0)
        pool.send([0, 1, 5, 1], [0, 1, 2, 3])  # env 2 (fast server): outside Discrete(2)
        with pytest.raises(InvalidArgumentError) as err:
            pool.recv(4)
        assert "outside the action space Discrete(2)" in str(err.value)
        assert "(raised by env 2 of the pool)" in err.value.__notes__
        # the other three results were kept for the next recv
        _, _, _, _, info = pool.recv(3)
        assert sorted(info["env_id"].tolist()) == [0, 1, 3]
        # env 2 is usable again
        _, _, _, _, info = pool.step([1], [2])
        assert info["env_id"].tolist() == [2]


def test_sending_to_a_busy_env_raises(fast_and_slow: tuple[ServerProcess, ServerProcess]) -> None:
    slow = fast_and_slow[1]
    with farm.EnvPool([slow.address], num_envs=3, batch_size=1) as pool:
        pool.reset(seed=0)
        pool.send([0, 1], [0, 1])
        with pytest.raises(FarmError, match=r"env\(s\) \[1\] are still stepping"):
            pool.send([0, 0], [1, 2])
        with pytest.raises(FarmError, match="repeated"):
            pool.send([0, 0], [2, 2])
        with pytest.raises(ConfigError, match=r"env ids must be in \[0, 3\)"):
            pool.send([0], [3])
        with pytest.raises(ConfigError, match="got 2 actions for 1 env ids"):
            pool.send([0, 0], [2])
        with pytest.raises(FarmError, match=r"reset\(\) while envs are stepping"):
            pool.reset()
        _, _, _, _, info = pool.recv(2)
        assert sorted(info["env_id"].tolist()) == [0, 1]
        pool.send([0], [1])  # free again
        assert pool.recv(1)[4]["env_id"].tolist() == [1]


def test_pool_config_errors(text_server: ServerProcess) -> None:
    with pytest.raises(ConfigError, match="batch_size must be in"):
        farm.EnvPool([text_server.address], num_envs=2, batch_size=3)
    with pytest.raises(ConfigError, match="autoreset must be one of"):
        farm.EnvPool([text_server.address], num_envs=1, autoreset="never")
    with pytest.raises(ConfigError, match="at least one address"):
        farm.EnvPool([], num_envs=1)
    # nothing was leaked by the failed constructions
    assert health(text_server.address).active_sessions == 0


def test_async_env_pool(fast_and_slow: tuple[ServerProcess, ServerProcess]) -> None:
    fast, slow = fast_and_slow

    async def main() -> None:
        pool = await farm.AsyncEnvPool.create([fast.address, slow.address], 4, batch_size=2)
        try:
            obs, info = await pool.reset(seed=3)
            assert obs.shape == (4, 4) and info["env_id"].tolist() == [0, 1, 2, 3]
            assert pool.observation_space.shape == (2, 4)
            pool.send(np.zeros(4, np.int64))
            obs, rew, term, trunc, info = await pool.recv()
            assert sorted(info["env_id"].tolist()) == [0, 2]  # the fast server's envs
            obs, rew, term, trunc, info = await pool.step([1, 1], info["env_id"])
            assert sorted(info["env_id"].tolist()) == [0, 2] and obs.shape == (2, 4)
            assert rew.shape == (2,) and not term.any() and not trunc.any()
            _, _, _, _, info = await pool.recv(2)
            assert sorted(info["env_id"].tolist()) == [1, 3]
            # recv waits for sends made later, as results arrive
            pool.send([1], [3])
            recv = asyncio.ensure_future(pool.recv(1))
            await asyncio.sleep(0.05)
            assert not recv.done()
            _, _, _, _, info = await recv
            assert info["env_id"].tolist() == [3]
        finally:
            await pool.close()
        assert all(env.closed for env in pool.envs)

    asyncio.run(main())
    # the pool's sessions are gone from both servers
    for srv in fast_and_slow:
        assert health(srv.address).active_sessions == 0
