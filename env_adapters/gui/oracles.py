"""What the scripted oracles of every GUI suite share: the episode loop and the command line.

A suite's oracles (``env_adapters.browser.oracles``, ``env_adapters.desktop.oracles``,
``env_adapters.android.oracles``) are :class:`ScriptedOracle`s: ``reset()`` before
an episode, then ``act(obs)`` returns the next action in the shared text form
(the helpers :func:`click`, :func:`key`... write it). :class:`PolicyOracle` is the
base of oracles written as one generator per episode. :func:`run_episode` plays
one episode of any env (in-process or ``farm.connect``-ed) with one; :func:`main`
and :class:`OracleSuite` give a suite module its ``oracle_for``, ``run_episode``
and ``python -m ... TASK --seeds N [--address ADDR]``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from env_adapters.gui import actions as A


class OracleError(RuntimeError):
    """The oracle cannot make sense of the observation (a bug, or a screen it does not know)."""


class ScriptedOracle(Protocol):
    def reset(self) -> None: ...

    def act(self, obs: dict[str, Any]) -> str: ...


# ---------------------------------------------------------------- action text


class Referenced(Protocol):
    """A text-view element (anything with a ref)."""

    @property
    def ref(self) -> int: ...


DONE, FAIL = "done()", "fail()"


def click(x: int, y: int) -> str:
    return A.format_action(A.Click(int(x), int(y)))


def click_element(element: Referenced) -> str:
    return A.format_action(A.ClickElement(element.ref))


def type_element(element: Referenced, text: str) -> str:
    return A.format_action(A.TypeElement(element.ref, text))


def select_element(element: Referenced, option: str) -> str:
    return A.format_action(A.SelectElement(element.ref, option))


def type_text(text: str) -> str:
    return A.format_action(A.TypeText(text))


def key(combo: str) -> str:
    return A.format_action(A.Key(combo))


def scroll(x: int, y: int, dx: int, dy: int) -> str:
    return A.format_action(A.Scroll(int(x), int(y), int(dx), int(dy)))


def wait(ms: int) -> str:
    return A.format_action(A.Wait(int(ms)))


# ---------------------------------------------------------------- oracle bases

#: a policy body: yields actions, receives the observation after each
Policy = Generator[str, dict[str, Any], None]
V = TypeVar("V")


class PolicyOracle(Generic[V]):
    """Base of the scripted policies written as one generator per episode.

    Subclasses write :meth:`policy` as a generator: it gets the first
    observation, ``yield``s an action and receives the next observation as the
    value of the ``yield``. When it returns, the oracle answers ``done()``. A
    suite's base says how it reads an observation (:meth:`read`, its view
    ``V``), which :meth:`wait_until` polls.
    """

    #: the env id the oracle plays
    task: str = ""
    #: how many times :meth:`wait_until` waits by default
    wait_tries: ClassVar[int] = 30

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the episode (call between episodes, or make a new oracle)."""
        self._policy: Policy | None = None
        self._finished = False

    def act(self, obs: dict[str, Any]) -> str:
        """The action for this observation."""
        if self._finished:
            return DONE
        try:
            if self._policy is None:
                self._policy = self.policy(obs)
                return next(self._policy)
            return self._policy.send(obs)
        except StopIteration:
            self._finished = True
            return DONE

    def policy(self, obs: dict[str, Any]) -> Policy:
        raise NotImplementedError
        yield  # pragma: no cover - makes this a generator

    # helpers for policies

    def read(self, obs: dict[str, Any]) -> V:
        """The suite's view of an observation."""
        raise NotImplementedError

    def not_ready(self, view: V, ms: int) -> str:
        """The error of a :meth:`wait_until` that waited ``ms`` in vain."""
        return f"not ready after {ms} ms"

    def parse(self, pattern: str, instruction: str) -> re.Match[str]:
        m = re.fullmatch(pattern, instruction.strip())
        if m is None:
            raise OracleError(f"{self.task}: unexpected instruction {instruction!r}")
        return m

    def wait_until(
        self,
        obs: dict[str, Any],
        ready: Callable[[V], bool],
        *,
        ms: int = 100,
        tries: int | None = None,
    ) -> Generator[str, dict[str, Any], V]:
        """``wait(ms)`` until ``ready(view)``; returns the view (use with ``yield from``)."""
        tries = self.wait_tries if tries is None else tries
        view = self.read(obs)
        for _ in range(tries):
            if ready(view):
                return view
            view = self.read((yield wait(ms)))
        raise OracleError(self.not_ready(view, ms * tries))


class DeclareInfeasible:
    """The oracle of an infeasible task: ``fail()``."""

    def reset(self) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> str:
        return FAIL


def run_episode(
    env: Any,
    oracle: ScriptedOracle,
    seed: int,
    *,
    max_steps: int = 60,
    trace: list[dict[str, Any]] | None = None,
) -> tuple[float, int, list[str]]:
    """Play one episode of ``env`` (text actions) with ``oracle``; returns
    ``(total_reward, steps, actions)``.

    ``trace``, if given, gets one dict per step (action, reward, terminated,
    truncated, info). The episode ends when it terminates or is truncated, or
    after ``max_steps`` steps.
    """
    oracle.reset()
    obs, _ = env.reset(seed=seed)
    total, actions = 0.0, []
    for _ in range(max_steps):
        action = oracle.act(obs)
        actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        if trace is not None:
            trace.append(
                {
                    "action": action,
                    "reward": float(reward),
                    "terminated": bool(terminated),
                    "truncated": bool(truncated),
                    "info": info,
                }
            )
        if terminated or truncated:
            break
    return total, len(actions), actions


class OracleSuite:
    """A suite's oracles by env id (feasible and infeasible tasks), and what a suite
    module offers with them: :meth:`oracle_for`, :meth:`run_episode`, :meth:`main`."""

    def __init__(
        self,
        feasible: Mapping[str, Callable[[], ScriptedOracle]],
        infeasible: Mapping[str, Callable[[], ScriptedOracle]],
        *,
        prog: str,
        description: str,
        default_seeds: int,
    ) -> None:
        self.feasible, self.infeasible = feasible, infeasible
        self.prog, self.description, self.default_seeds = prog, description, default_seeds

    def oracle_for(self, task: str) -> Any:
        """A fresh oracle for env id ``task``; KeyError naming the known ones."""
        make = self.feasible.get(task) or self.infeasible.get(task)
        if make is None:
            known = sorted({*self.feasible, *self.infeasible})
            raise KeyError(f"no oracle for {task!r}; oracles: {', '.join(known)}")
        return make()

    def run_episode(
        self,
        env: Any,
        task: str | ScriptedOracle,
        seed: int,
        *,
        max_steps: int = 60,
        trace: list[dict[str, Any]] | None = None,
    ) -> tuple[float, int, list[str]]:
        """:func:`run_episode` with the oracle of ``task`` (an env id, or an oracle)."""
        oracle = self.oracle_for(task) if isinstance(task, str) else task
        return run_episode(env, oracle, seed, max_steps=max_steps, trace=trace)

    def main(self, argv: list[str] | None = None) -> int:
        """``python -m <suite>.oracles TASK [--seeds N] [--first-seed S] [--address A]``:
        one line per episode; exit 0 iff every episode ended terminated with reward 1."""
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description)
        names = ", ".join([*self.feasible, *self.infeasible])
        parser.add_argument("task", help=f"env id, one of: {names}")
        parser.add_argument(
            "--seeds",
            type=int,
            default=self.default_seeds,
            help=f"number of seeds ({self.default_seeds})",
        )
        parser.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
        parser.add_argument(
            "--address", help="a farm server serving TASK (default: the env in this process)"
        )
        args = parser.parse_args(argv)
        try:
            oracle = self.oracle_for(args.task)
        except KeyError as e:
            parser.error(str(e.args[0]))
        if args.address:
            import farm

            env = farm.connect(args.address)
        else:
            from farm.registry import make

            env = make(args.task)
        solved, start = 0, time.perf_counter()
        try:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                solved += _play_and_print(env, oracle, seed)
        finally:
            env.close()
        print(f"{args.task}: {solved}/{args.seeds} solved in {time.perf_counter() - start:.1f}s")
        return 0 if solved == args.seeds else 1


def _play_and_print(env: Any, oracle: ScriptedOracle, seed: int) -> bool:
    """One episode for the command line; True if it was solved."""
    t0 = time.perf_counter()
    trace: list[dict[str, Any]] = []
    try:
        reward, steps, actions = run_episode(env, oracle, seed, trace=trace)
    except OracleError as e:
        reward, steps, actions = 0.0, len(trace), [t["action"] for t in trace]
        actions.append(f"<oracle error: {e}>")
    ok = reward == 1.0 and bool(trace) and trace[-1]["terminated"]
    last = trace[-1]["info"] if trace else {}
    note = "" if ok else f"  info={json.dumps(last, default=str)}"
    print(
        f"seed {seed:4d}  reward {reward:+.2f}  steps {steps:2d}  "
        f"{time.perf_counter() - t0:5.2f}s  {'ok  ' if ok else 'FAIL'}  "
        f"{' '.join(actions)}{note}",
        flush=True,
    )
    return ok
