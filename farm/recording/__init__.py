"""Episode recording and replay: the episode store and its tools.

* :mod:`~farm.recording.format`: the on-disk format (docs/episode_format.md);
* :mod:`~farm.recording.writer` / :mod:`~farm.recording.reader`: one episode directory;
* :mod:`~farm.recording.index` / :mod:`~farm.recording.store`: a store and its SQLite index;
* :mod:`~farm.recording.recorder`: recording any env (``farm serve --record DIR``);
* :mod:`~farm.recording.replay`: re-running an episode and comparing (``farm replay``);
* :mod:`~farm.recording.viewer`: the self-contained HTML viewer (``farm replay --html``);
* :mod:`~farm.recording.export`: Parquet export (``farm episodes export``);
* :mod:`~farm.recording.replay_env`: a recorded episode served as an env.
"""

from farm.recording.errors import (
    CorruptEpisodeError,
    EpisodeNotFoundError,
    MissingFrameError,
    RecordingError,
    ReplayError,
)
from farm.recording.index import EpisodeFilter
from farm.recording.reader import Episode, StepRecord
from farm.recording.recorder import (
    AsyncRecordingEnv,
    Recorder,
    RecordingConfig,
    RecordingEnv,
    record,
    recording_factory,
)
from farm.recording.store import EpisodeStore
from farm.recording.writer import FileOps, RecordingFailed

__all__ = [
    "AsyncRecordingEnv",
    "CorruptEpisodeError",
    "Episode",
    "EpisodeFilter",
    "EpisodeNotFoundError",
    "EpisodeStore",
    "FileOps",
    "MissingFrameError",
    "Recorder",
    "RecordingConfig",
    "RecordingEnv",
    "RecordingError",
    "RecordingFailed",
    "ReplayError",
    "StepRecord",
    "record",
    "recording_factory",
]
