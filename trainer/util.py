"""Small shared helpers: lazy imports of the ``train`` extra."""

from __future__ import annotations

from typing import Any

from farm.errors import MissingExtraError


def require_torch() -> Any:
    """``torch``, or :class:`MissingExtraError` naming the extra to install."""
    try:
        import torch
    except ImportError as e:
        raise MissingExtraError("torch", "train") from e
    return torch
