"""Type-checked construction of component configs from recipe mappings."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


class ConfigError(ValueError):
    """A recipe value has the wrong type, or a recipe names a field that does not exist."""


def make_config(cls: type, values: Mapping[str, Any] | Any, *, where: str) -> Any:
    """Build dataclass ``cls`` from ``values``, checking names and types.

    Uses OmegaConf's structured configs for the type check, so ``"8"`` for an
    ``int`` field is accepted (recipes and command lines are text) but ``"abc"`` is
    not. Errors name the field: ``encoder 'catalog': field 'batch_size': ...``.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    if values is None:
        values = {}
    if dataclasses.is_dataclass(values) and not isinstance(values, type):
        values = dataclasses.asdict(values)
    if OmegaConf.is_config(values):
        values = OmegaConf.to_container(values, resolve=True)
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}: expected a mapping of config fields, got {type(values).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field {', '.join(repr(u) for u in unknown)}; "
            f"valid fields: {', '.join(sorted(names)) or '(none)'}{closest_hint(unknown[0], names)}"
        )
    try:
        node = OmegaConf.merge(OmegaConf.structured(cls), dict(values))
        return OmegaConf.to_object(node)
    except ConfigKeyError as e:  # pragma: no cover - caught above
        raise ConfigError(f"{where}: {e.msg}") from None
    except OmegaConfBaseException as e:
        field = getattr(e, "full_key", None) or getattr(e, "key", None) or "?"
        msg = str(getattr(e, "msg", e)).splitlines()[0]
        raise ConfigError(f"{where}: field '{field}': {msg}") from None


def closest_hint(word: str, options) -> str:
    """``"; did you mean 'lam'?"`` for the option closest to a mistyped ``word``, or ``""``."""
    import difflib

    match = difflib.get_close_matches(str(word), sorted(map(str, options)), n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else ""


def config_dict(cfg: Any) -> dict[str, Any]:
    """A plain dict of a config dataclass (for identities and resolved recipes)."""
    return dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg or {})
