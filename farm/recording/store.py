"""An episode store: a directory of episode directories plus its index."""

from __future__ import annotations

import os
import shutil
from typing import Any

from farm.recording import format as F
from farm.recording.errors import EpisodeNotFoundError
from farm.recording.index import EpisodeFilter, EpisodeIndex
from farm.recording.reader import Episode


#: where ``farm episodes`` looks when neither ``--store`` nor ``$FARM_EPISODES`` is given
def default_root() -> str:
    env = os.environ.get("FARM_EPISODES")
    if env:
        return env
    home = os.environ.get("FARM_HOME") or os.path.join(os.path.expanduser("~"), ".farm")
    return os.path.join(home, "episodes")


class EpisodeStore:
    """The episodes under ``root`` (created on first write, never required to exist)."""

    def __init__(self, root: str | None = None) -> None:
        self.root = os.path.abspath(root or default_root())
        self._index: EpisodeIndex | None = None

    @property
    def index(self) -> EpisodeIndex:
        if self._index is None:
            self._index = EpisodeIndex(self.root)
        return self._index

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

    def list(self, flt: EpisodeFilter | None = None) -> list[dict[str, Any]]:
        """Summaries of the matching episodes (the index is synced first)."""
        self.index.sync()
        return self.index.query(flt)

    def resolve(self, ref: str) -> str:
        """The directory of ``ref``: a path, an episode id, or a unique id prefix/suffix."""
        if os.sep in ref or ref.startswith("."):
            path = os.path.abspath(ref)
            if not os.path.isdir(path):
                raise EpisodeNotFoundError(f"no episode directory at {path}")
            return path
        if os.path.isdir(ref) and os.path.exists(os.path.join(ref, F.META_FILE)):
            return os.path.abspath(ref)
        exact = os.path.join(self.root, ref)
        if F.valid_episode_id(ref) and os.path.isdir(exact):
            return exact
        try:
            names = [
                e.name
                for e in os.scandir(self.root)
                if e.is_dir() and (e.name.startswith(ref) or e.name.endswith(ref))
            ]
        except FileNotFoundError:
            names = []
        if len(names) == 1:
            return os.path.join(self.root, names[0])
        if not names:
            raise EpisodeNotFoundError(f"no episode {ref!r} in {self.root}")
        raise EpisodeNotFoundError(
            f"{ref!r} matches {len(names)} episodes in {self.root}: {', '.join(sorted(names)[:5])}"
        )

    def open(self, ref: str) -> Episode:
        return Episode(self.resolve(ref))

    def remove(self, ref: str) -> str:
        """Delete one episode directory; returns its path."""
        path = self.resolve(ref)
        if not os.path.exists(os.path.join(path, F.META_FILE)) and not os.path.exists(
            os.path.join(path, F.STEPS_FILE)
        ):
            raise EpisodeNotFoundError(f"{path} is not an episode directory; not removing it")
        shutil.rmtree(path)
        return path
