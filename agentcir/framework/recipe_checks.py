"""Checks of a composed recipe that need more than the field types and ranges: paths, devices,
the run loggers (:mod:`agentcir.framework.tracking`), and what the method needs its components to
support (:mod:`agentcir.framework.capabilities`).

Run by :func:`agentcir.framework.recipe.validate` (so by ``compose``), before any component
or model is built: a bad value fails in a second, naming the field, instead of deep inside
a run (or, worse, silently changing what the run does). Numeric ranges are declared on the config
dataclasses and checked as each one is built (:func:`agentcir.registry.config.check_ranges`).
"""

from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from ..registry import LOGGERS, ConfigError, RegistryError, make_config
from ..registry.config import closest_hint


def check_run_name(run: dict[str, Any]) -> None:
    """``run.name`` must be a relative path that stays inside ``run.root``."""
    name = run.get("name")
    if not str(run.get("root") or "").strip():
        raise ConfigError("run: field 'root': must be a folder, got an empty value")
    if name is None:
        return
    text = str(name)
    parts = text.replace("\\", "/").split("/")
    if (
        not text.strip()
        or PurePosixPath(text).is_absolute()
        or PureWindowsPath(text).is_absolute()
        or PureWindowsPath(text).drive
        or any(p in ("..", ".") for p in parts)
        or "\0" in text
    ):
        raise ConfigError(
            f"run: field 'name': must be a folder name (or relative path) inside run.root "
            f"without '..', '.' or a leading '/', got {name!r}"
        )


def device_problem(device: str) -> str | None:
    """Why torch ``device`` cannot be used here, or ``None`` when it can (or torch is absent: the
    component then fails with its own install hint)."""
    import importlib.util

    d = str(device).strip().lower()
    if d in ("cpu", "auto", ""):
        return None
    kind, _, index = d.partition(":")
    if kind not in ("cuda", "mps", "xpu"):
        return f"unknown device '{device}' (use cpu, cuda, cuda:N or mps)"
    if index and not index.isdigit():
        return f"device '{device}' has a bad index (use e.g. cuda:0)"
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if kind == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            return f"device '{device}' is not available ({why}, torch {torch.__version__}); use device=cpu"
        if index and int(index) >= torch.cuda.device_count():
            return f"device '{device}' does not exist (this machine has {torch.cuda.device_count()} CUDA device(s))"
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        return f"device '{device}' is not available (no Apple MPS here); use device=cpu"
    if kind == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        return f"device '{device}' is not available (no Intel XPU here); use device=cpu"
    return None


def check_devices(recipe: dict[str, Any], groups: tuple[str, ...]) -> None:
    for group in groups:
        node = recipe.get(group) or {}
        dev = node.get("device")
        if isinstance(dev, str):
            why = device_problem(dev)
            if why:
                raise ConfigError(f"{group} '{node.get('name')}': field 'device': {why}")


def check_loggers(run: dict[str, Any]) -> None:
    """Check ``run.loggers`` and ``run.tracking`` when a recipe is composed: every name a registered
    logger (else a :class:`ConfigError` with the closest one), its settings its ``Config``'s fields,
    its extra installed (else a :class:`~agentcir.errors.MissingExtraError` naming it)."""
    names = run.get("loggers") or []
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(
            f"run: field 'loggers': expected a list of logger names (run.loggers=[csv,mlflow]), got {names!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"run: field 'loggers': a logger is listed twice in {names}")
    settings = run.get("tracking") or {}
    for name in [*names, *(k for k in settings if k not in names)]:
        try:
            entry = LOGGERS.get(name)
        except RegistryError as e:
            where = "loggers" if name in names else f"tracking.{name}"
            raise ConfigError(f"run: field '{where}': {e}{closest_hint(name, LOGGERS.keys())}") from None
        node = settings.get(name)
        make_config(entry.config, node if node is not None else {}, where=f"run.tracking.{name}")
        if name in names:
            entry.obj.require(name)


def check_recipe(recipe: dict[str, Any], groups: tuple[str, ...], devices: bool = True) -> None:
    """Every check of this module on a resolved recipe (raises :class:`ConfigError`); ``devices``
    false skips the devices' availability (``--plan``, ``--print-recipe``: nothing runs here)."""
    from .capabilities import check_capabilities

    check_run_name(recipe["run"])  # numeric ranges: checked as each config is built (agentcir.registry.config)
    check_capabilities(recipe, groups)  # what the method needs of its components (no model loads)
    if devices:
        check_devices(recipe, groups)
