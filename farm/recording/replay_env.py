"""A recorded episode served as an env: semi-online training on recorded trajectories.

:class:`ReplayEnv` plays back recorded episodes. ``reset`` returns the recorded
first observation; each ``step(action)`` compares the agent's action with the
recorded one (GUI text actions in their normalised text form, so
``click( 3,4 )`` matches ``click(3, 4)``; other actions by value). On a match
the env advances along the recording (recorded observation, reward, flags).
On a mismatch it reports the divergence in ``info["farm.replay.divergence"]``
(step, expected, got) and, by ``on_divergence``:

* ``"truncate"`` (default): the episode ends, ``truncated=True``, reward 0, the
  observation stays where the agent diverged;
* ``"follow"``: the env follows the recording anyway (the agent is shown what
  the expert did next), ``info["farm.replay.match"]`` is False.

Serve it like any env (one episode, or every complete matching episode of a
store in turn, one per reset)::

    farm serve farm.recording.replay_env:ReplayEnv --env-kwargs '{"episode": "/path/to/ep"}'
    farm serve farm.recording.replay_env:ReplayEnv \\
        --env-kwargs '{"store": "~/.farm/episodes", "task": "miniwob/*", "outcome": "success"}'
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import gymnasium as gym

from farm.errors import ConfigError
from farm.recording import format as F
from farm.recording.index import EpisodeFilter
from farm.recording.reader import Episode
from farm.recording.store import EpisodeStore

Divergence = Literal["truncate", "follow"]
DIVERGENCE_KEY = "farm.replay.divergence"
MATCH_KEY = "farm.replay.match"
EPISODE_KEY = "farm.replay.episode"
STEP_KEY = "farm.replay.step"


def normalise_action(action: Any) -> str:
    """The comparable form of an action: GUI text actions re-formatted, else JSON."""
    if isinstance(action, str):
        try:
            from env_adapters.gui.actions import format_action, parse_action

            return format_action(parse_action(action))
        except Exception:  # noqa: BLE001 - not a GUI action (or malformed): compare as text
            return action.strip()
    return json.dumps(F.encode_value(action, {}), sort_keys=True)


class ReplayEnv(gym.Env):
    """Serves recorded episodes (see module doc)."""

    metadata: dict[str, Any] = {"render_modes": [], "farm.executor": "inline"}

    def __init__(
        self,
        episode: str | list[str] | None = None,
        *,
        store: str | None = None,
        task: str | None = None,
        outcome: str | None = "success",
        job: str | None = None,
        on_divergence: Divergence = "truncate",
    ) -> None:
        if on_divergence not in ("truncate", "follow"):
            raise ConfigError(
                f"on_divergence must be 'truncate' or 'follow', got {on_divergence!r}"
            )
        self.on_divergence = on_divergence
        if episode is not None:
            refs = [episode] if isinstance(episode, str) else list(episode)
            st = EpisodeStore(store)
            paths = [st.resolve(os.path.expanduser(r)) for r in refs]
        elif store is not None:
            rows = EpisodeStore(os.path.expanduser(store)).list(
                EpisodeFilter(task=task, outcome=outcome, job=job)
            )
            paths = [r["path"] for r in rows if r["complete"]]
        else:
            raise ConfigError("ReplayEnv needs an episode (path or id) or a store")
        if not paths:
            raise ConfigError(f"no recorded episodes match (store {store!r}, task {task!r})")
        self.episodes = [Episode(p) for p in paths]
        first = self.episodes[0].meta
        for ep in self.episodes:
            if ep.meta.env_id != first.env_id:
                raise ConfigError(
                    f"episodes of different envs cannot share one ReplayEnv: {first.env_id!r} "
                    f"and {ep.meta.env_id!r}"
                )
            if not ep.steps:
                raise ConfigError(f"episode {ep.episode_id} has no recorded reset")
        if not first.observation_space or not first.action_space:
            raise ConfigError(f"episode {first.episode_id} did not record its spaces")
        self.observation_space = F.space_from_b64(first.observation_space)
        self.action_space = F.space_from_b64(first.action_space)
        self.metadata = {
            **type(self).metadata,
            "farm.task": first.task or first.env_id,
            "farm.kind": "replay",
            "farm.replay.env_id": first.env_id,
        }
        self._next = 0
        self._ep: Episode | None = None
        self._i = 0
        self._obs: Any = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        wanted = (options or {}).get("episode")
        if wanted is not None:
            matches = [e for e in self.episodes if e.episode_id.startswith(str(wanted))]
            if len(matches) != 1:
                raise ConfigError(f"options.episode {wanted!r} matches {len(matches)} episodes")
            self._ep = matches[0]
        else:
            self._ep = self.episodes[self._next % len(self.episodes)]
            self._next += 1
        self._i = 0
        self._obs = self._ep.observation(0)
        info = {**self._ep.steps[0].info, EPISODE_KEY: self._ep.episode_id, STEP_KEY: 0}
        return self._obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        ep = self._ep
        if ep is None:
            raise RuntimeError("step() before reset()")
        if self._i + 1 >= len(ep.steps):
            info = {EPISODE_KEY: ep.episode_id, STEP_KEY: self._i}
            info[DIVERGENCE_KEY] = {"step": self._i + 1, "reason": "the recording ends here"}
            return self._obs, 0.0, False, True, info
        expected = ep.action(self._i + 1)
        match = normalise_action(action) == normalise_action(expected)
        info: dict[str, Any] = {EPISODE_KEY: ep.episode_id, MATCH_KEY: match}
        if not match:
            info[DIVERGENCE_KEY] = {
                "step": self._i + 1,
                "expected": normalise_action(expected),
                "got": normalise_action(action),
            }
            if self.on_divergence == "truncate":
                info[STEP_KEY] = self._i
                return self._obs, 0.0, False, True, info
        self._i += 1
        rec = ep.steps[self._i]
        self._obs = ep.observation(self._i)
        info.update(rec.info)
        info[STEP_KEY] = self._i
        terminated, truncated = rec.terminated, rec.truncated
        if not (terminated or truncated) and self._i + 1 >= len(ep.steps):
            truncated = True  # an incomplete recording: nothing more to follow
            info.setdefault(
                DIVERGENCE_KEY, {"step": self._i + 1, "reason": "the recording ends here"}
            )
        return self._obs, rec.reward, terminated, truncated, info


def make_replay_env(**kwargs: Any) -> ReplayEnv:
    """Factory for ``farm serve farm.recording.replay_env:make_replay_env --env-kwargs ...``."""
    return ReplayEnv(**kwargs)
