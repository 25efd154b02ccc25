"""Policies behind :class:`trainer.api.Policy`, by name (the job spec's ``policy.name``):
a built-in name or ``module:Class`` (any importable :class:`~trainer.api.Policy`)."""

from __future__ import annotations

import importlib
from typing import Any

from trainer.api.policy import Policy
from trainer.errors import JobSpecError

POLICIES = ("text-pointer", "lm")


def make_policy(name: str, *, role: str = "learner", **kwargs: Any) -> Policy:
    """Policy ``name`` for ``role`` (``learner`` or ``actor``: a job makes one of each;
    policies whose two sides differ, like language models, take ``role``)."""
    if name == "text-pointer":
        from trainer.policies.text_pointer import TextPointerPolicy

        return TextPointerPolicy(**kwargs)
    if name == "lm":
        from trainer.llm.policy import LMPolicy

        if "model" not in kwargs:
            raise JobSpecError("policy.kwargs.model: the lm policy needs a model directory")
        return LMPolicy(role=role, **kwargs)
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise JobSpecError(f"policy.name: cannot import {name!r}: {e}") from None
        import inspect

        if "role" in inspect.signature(cls).parameters:
            kwargs["role"] = role
        policy = cls(**kwargs)
        if not isinstance(policy, Policy):
            raise JobSpecError(f"policy.name: {name} is not a trainer.api.Policy")
        return policy
    raise JobSpecError(
        f"policy.name: unknown policy {name!r}; known: {', '.join(POLICIES)}, or module:Class"
    )
