"""Environment ids: how ``farm serve ENV`` finds what to serve.

``ENV`` may be

1. an import path ``package.module:factory`` (any callable returning an env),
2. a farm env id ``<namespace>/<name>`` (``toy/text-task``, ``miniwob/click-button``),
   whose namespace module registers it on first use, or a plugin registered
   under the ``farm.envs`` entry-point group,
3. a gymnasium id (``CartPole-v1``), made with :func:`gymnasium.make`.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata as importlib_metadata
from typing import Any

from farm.errors import EnvNotFoundError, MissingExtraError

EnvFactory = Callable[..., Any]


@dataclass(frozen=True)
class EnvEntry:
    """A registered farm environment."""

    env_id: str
    factory: EnvFactory
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""


_REGISTRY: dict[str, EnvEntry] = {}

#: Namespaces whose module registers their envs when first imported.
_NAMESPACES: dict[str, str] = {
    "toy": "env_adapters.toy",
    "miniwob": "env_adapters.browser.miniwob",
    "desktop": "env_adapters.desktop.tasks",
    "android": "env_adapters.android.tasks",
}
_loaded_namespaces: set[str] = set()


def register(env_id: str, factory: EnvFactory, *, description: str = "", **kwargs: Any) -> None:
    """Register ``factory`` (called with ``kwargs`` plus the caller's) as ``env_id``."""
    if "/" not in env_id:
        raise ValueError(f"farm env ids have the form <namespace>/<name>, got {env_id!r}")
    _REGISTRY[env_id] = EnvEntry(env_id, factory, dict(kwargs), description)


def _load_namespace(namespace: str) -> None:
    if namespace in _loaded_namespaces:
        return
    _loaded_namespaces.add(namespace)
    module = _NAMESPACES.get(namespace)
    if module is not None:
        importlib.import_module(module)
    for ep in importlib_metadata.entry_points(group="farm.envs"):
        if ep.name == namespace or ep.name.startswith(namespace + "/"):
            ep.load()


def registered(namespace: str | None = None) -> list[EnvEntry]:
    """Every registered farm env (loading the built-in namespaces), sorted by id."""
    for ns in _NAMESPACES if namespace is None else [namespace]:
        try:
            _load_namespace(ns)
        except MissingExtraError:
            if namespace is not None:
                raise  # asked for this namespace: say which extra to install
            # listing everything: a namespace whose optional extra is missing has no envs
    return sorted(
        (
            e
            for e in _REGISTRY.values()
            if namespace is None or e.env_id.startswith(namespace + "/")
        ),
        key=lambda e: e.env_id,
    )


def _import_path(spec: str) -> EnvFactory:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise EnvNotFoundError(f"cannot import module {module_name!r} of {spec!r}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise EnvNotFoundError(f"module {module_name!r} has no attribute {attr!r}") from e
    if not callable(obj):
        raise EnvNotFoundError(f"{spec!r} is not callable")
    return obj


def resolve(spec: str, **kwargs: Any) -> Callable[[], Any]:
    """A zero-argument factory for ``spec`` (see module doc) with ``kwargs`` bound."""
    if ":" in spec:
        return partial(_import_path(spec), **kwargs)
    namespace = spec.split("/", 1)[0] if "/" in spec else None
    if namespace is not None:
        try:
            _load_namespace(namespace)
        except MissingExtraError:
            raise
        except ImportError as e:
            raise EnvNotFoundError(f"cannot load env namespace {namespace!r}: {e}") from e
        entry = _REGISTRY.get(spec)
        if entry is not None:
            return partial(entry.factory, **{**entry.kwargs, **kwargs})
    import gymnasium

    if spec in gymnasium.registry:
        return partial(gymnasium.make, spec, **kwargs)
    if namespace is not None and namespace in _NAMESPACES:
        known = [e.env_id for e in registered(namespace)]
    else:
        known = [*_REGISTRY, *gymnasium.registry]
    hint = difflib.get_close_matches(spec, known, n=3)
    raise EnvNotFoundError(
        f"no environment {spec!r}"
        + (f"; did you mean {', '.join(hint)}?" if hint else "")
        + " (use an id from `farm envs`, a gymnasium id, or module:factory)"
    )


def make(spec: str, **kwargs: Any) -> Any:
    """Construct the env named by ``spec`` in-process."""
    return resolve(spec, **kwargs)()
