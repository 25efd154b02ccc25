"""Errors of the episode store (all under :class:`farm.errors.FarmError`)."""

from __future__ import annotations

from farm.errors import FarmError


class RecordingError(FarmError):
    """Base class of episode store errors."""


class EpisodeNotFoundError(RecordingError, LookupError):
    """No episode directory (or no unique one) for the given id or path."""


class CorruptEpisodeError(RecordingError):
    """An episode directory whose files are missing, truncated or malformed."""


class MissingFrameError(CorruptEpisodeError, FileNotFoundError):
    """A step references a frame file that is not there."""


class ReplayError(RecordingError):
    """An episode that cannot be replayed (unknown env, no seed, ...)."""
