"""Type-checked construction of component configs from recipe mappings, with numeric ranges.

Every numeric field of a config has a range, checked whenever a config is built from a recipe
(so at compose time, before anything runs): a NaN or an infinity is always refused, and

* a field declared with :func:`bounded` has the range it declares
  (``lam: float = bounded(0.2, 0.0, 1.0)``; ``lo=None``: no lower bound);
* a field without a declaration whose name has one meaning across components takes the range of
  :data:`NAMED_RANGES` (``batch_size``, ``timeout``, ``retries``, ``concurrency``, ``top_k``, ...);
* any other numeric field must not be negative (:data:`DEFAULT_RANGE`).

Numbers inside a list or a mapping field (``grids: [1, 2]``, ``min_prob: {patterns: 0.5}``) are
checked one by one against the field's range. ``None`` (an optional field left unset) is not checked.

A field that takes one of a set of words is typed with a :class:`Choice` (a ``str``-valued Enum):
recipes and command lines give the plain word (``dtype: float16``), the built config holds the
member (equal to the word, so ``cfg.dtype == "float16"`` holds), and a word outside the set is a
:class:`ConfigError` listing the allowed words and the closest one.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Mapping


class ConfigError(ValueError):
    """A recipe value has the wrong type or is out of its range, or a recipe names a field that does not exist."""


class Choice(str, enum.Enum):
    """The allowed words of a config field, as a ``str``-valued Enum::

        class DType(Choice):
            float32 = "float32"
            float16 = "float16"

        dtype: DType = DType.float32

    A member is the word itself for every use of a string (``==``, hashing, ``str()``, f-strings,
    JSON), so code and recipes keep using the plain word; :func:`make_config` turns a recipe's word
    into the member, or refuses it listing :meth:`values`."""

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """The allowed words, in declaration order."""
        return tuple(m.value for m in cls)

    @classmethod
    def parse(cls, value: Any, *, where: str, field: str) -> "Choice":
        """The member whose word is ``value``; a :class:`ConfigError` naming ``where``, ``field``,
        the allowed words and the closest one otherwise."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for m in cls:
                if m.value == value:
                    return m
        raise ConfigError(
            f"{where}: field '{field}': must be one of {', '.join(cls.values())}, "
            f"got {value!r}{closest_hint(value, cls.values())}"
        )


@functools.cache
def choice_fields(cls: type) -> dict[str, type[Choice]]:
    """``{field name: Choice class}`` of config dataclass ``cls`` (``Optional[...]`` fields too)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: no field is read as a choice
        return {}
    out = {}
    for f in dataclasses.fields(cls):
        tp = hints.get(f.name)
        args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
        for a in args:
            if isinstance(a, type) and issubclass(a, Choice):
                out[f.name] = a
    return out


#: the key of a field's :class:`Range` in its dataclass metadata
RANGE = "agentcir.range"


@dataclass(frozen=True)
class Range:
    """Allowed values of a numeric field: ``lo`` to ``hi`` inclusive (``None``: unbounded on that side);
    ``lo_open``: ``lo`` itself excluded (a timeout or a softmax temperature above 0). Never NaN nor infinite."""

    lo: float | None = 0
    hi: float | None = None
    lo_open: bool = False
    note: str = ""  # what a special value means, e.g. "0: every query"

    def describe(self) -> str:
        """The range in words: ``"within 0..1"``, ``"at least 1"``, ``"above 0"``, with its note."""
        if self.lo is not None and self.hi is not None:
            text = f"within {_num(self.lo)}..{_num(self.hi)}" + (f" and above {_num(self.lo)}" if self.lo_open else "")
        elif self.lo is not None:
            text = f"{'above' if self.lo_open else 'at least'} {_num(self.lo)}"
        elif self.hi is not None:
            text = f"at most {_num(self.hi)}"
        else:
            text = "a finite number"
        return f"{text} ({self.note})" if self.note else text

    def problem(self, v: float) -> str | None:
        """Why ``v`` is out of range (``"must be ..."``), or ``None``."""
        if not math.isfinite(v):
            return f"must be a finite number{'' if self.lo is None and self.hi is None else ' ' + self.describe()}"
        low = self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo)
        if low or (self.hi is not None and v > self.hi):
            return f"must be {self.describe()}"
        return None


#: the range of a numeric field that declares none and has no name of :data:`NAMED_RANGES`
DEFAULT_RANGE = Range(0, None)

#: ranges of field names that mean the same in every component that has them
NAMED_RANGES: dict[str, Range] = {
    "batch_size": Range(1),
    "num_threads": Range(0, note="0: the library's default"),
    "concurrency": Range(1),
    "timeout": Range(0, lo_open=True),
    "retries": Range(0),
    "parse_retries": Range(0),
    "backoff": Range(0),
    "backoff_max": Range(0),
    "retry_after_max": Range(0),
    "max_tokens": Range(1),
    "max_new_tokens": Range(1),
    "top_k": Range(1),
    "limit": Range(0, note="0: all, N >= 1: the first N"),
    "seed": Range(0),
    "temperature": Range(0),  # a sampling temperature (a divisor declares lo_open)
}


def bounded(
    default: Any = dataclasses.MISSING,
    lo: float | None = 0,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    note: str = "",
    default_factory: Any = dataclasses.MISSING,
    **kw: Any,
) -> Any:
    """A dataclass field whose numbers must lie in ``lo..hi`` (see :class:`Range`), e.g.
    ``lam: float = bounded(0.2, 0.0, 1.0)``, ``tau: float = bounded(0.04, 0, lo_open=True)``,
    ``z: float = bounded(2.0, None)`` (any finite number)."""
    meta = {**kw.pop("metadata", {}), RANGE: Range(lo, hi, lo_open, note)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta, **kw)
    return dataclasses.field(default=default, metadata=meta, **kw)


def field_range(f: dataclasses.Field) -> Range:
    """The range of config field ``f`` (declared, by name, or the default)."""
    return f.metadata.get(RANGE) or NAMED_RANGES.get(f.name) or DEFAULT_RANGE


def _num(v: Any) -> str:
    return str(v) if isinstance(v, int) else f"{v:g}"


def _numbers(value: Any, name: str):
    """``(label, number)`` for every number in a field's value (itself, or inside lists and mappings)."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{name}[{i}]")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _numbers(v, f"{name}.{k}")


def check_ranges(cfg: Any, *, where: str, prefix: str = "") -> None:
    """Check every numeric field of config dataclass ``cfg`` against its range (nested config
    dataclasses too). Raises :class:`ConfigError` naming the field, the value and the range."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_ranges(value, where=where, prefix=f"{prefix}{f.name}.")
            continue
        rng = field_range(f)
        for label, v in _numbers(value, f"{prefix}{f.name}"):
            why = rng.problem(v)
            if why:
                raise ConfigError(f"{where}: field '{label}': {why}, got {_num(v)}")


def make_config(cls: type, values: Mapping[str, Any] | Any, *, where: str) -> Any:
    """Build dataclass ``cls`` from ``values``, checking names, types and ranges (:func:`check_ranges`).

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
    values = dict(values)
    for name, kind in choice_fields(cls).items():
        if values.get(name) is not None:
            values[name] = kind.parse(values[name], where=where, field=name)
    try:
        node = OmegaConf.merge(OmegaConf.structured(cls), values)
        cfg = OmegaConf.to_object(node)
    except ConfigKeyError as e:  # pragma: no cover - caught above
        raise ConfigError(f"{where}: {e.msg}") from None
    except OmegaConfBaseException as e:
        field = getattr(e, "full_key", None) or getattr(e, "key", None) or "?"
        msg = str(getattr(e, "msg", e)).splitlines()[0]
        raise ConfigError(f"{where}: field '{field}': {msg}") from None
    check_ranges(cfg, where=where)
    return cfg


def closest_hint(word: str, options) -> str:
    """``"; did you mean 'lam'?"`` for the option closest to a mistyped ``word``, or ``""``."""
    import difflib

    match = difflib.get_close_matches(str(word), sorted(map(str, options)), n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else ""


def check_choices(cfg: Any, *, where: str) -> None:
    """Turn the words of config dataclass ``cfg``'s :class:`Choice` fields into members, in place
    (a config built in Python, ``Config(dtype="float16")``, as a recipe's is); a word outside its
    set is a :class:`ConfigError` as in :func:`make_config`."""
    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
        return
    for name, kind in choice_fields(type(cfg)).items():
        value = getattr(cfg, name)
        if value is not None and not isinstance(value, kind):
            object.__setattr__(cfg, name, kind.parse(value, where=where, field=name))


def config_dict(cfg: Any) -> dict[str, Any]:
    """A plain dict of a config dataclass (for identities and resolved recipes): a :class:`Choice`
    member is its word, so the dict writes to YAML and JSON as the recipe gave it."""
    return _plain(dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg or {}))


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value
