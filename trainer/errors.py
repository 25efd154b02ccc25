"""The trainer's errors: part of farm's one exception tree (:mod:`farm.errors`)."""

from __future__ import annotations

from farm.errors import ConfigError, FarmError


class TrainerError(FarmError):
    """Base of the trainer's errors."""


class JobSpecError(TrainerError, ConfigError):
    """An invalid job spec; the message names the key."""


class StalenessError(TrainerError):
    """The staleness accounting was broken (a bug, never an expected condition)."""


class LogprobMismatchError(TrainerError):
    """Behaviour and proximal log-probabilities disagree with what their versions imply:
    identical although the samples are stale (the acting copy never got new weights),
    or different although they are fresh (acting and learning compute differently)."""


class TrainingDivergedError(TrainerError):
    """Losses or weights stopped being finite too many times in a row."""


class PolicyError(TrainerError):
    """The policy itself failed (not the sandbox): the job stops with the cause."""
