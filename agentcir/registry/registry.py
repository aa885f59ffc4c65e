"""The one naming system of agentcir: a `Registry` maps string keys to components.

A component is registered once, next to a typed ``Config`` dataclass::

    @ENCODERS.register("catalog")
    class CatalogEncoder(Encoder):
        @dataclass
        class Config:
            batch_size: int = 64

Look-ups are lazy: each registry knows, without importing anything, which module
defines each built-in key (declared in :mod:`agentcir.registry`), and third-party
packages add keys through the entry-point group ``agentcir.<kind plural>`` (e.g.
``agentcir.encoders``), whose value is the module that registers the key. Looking a
key up imports only that module.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Iterator, Mapping


class RegistryError(LookupError):
    """An unknown key, a duplicate key, or a module that did not register its key."""

    def __str__(self) -> str:  # LookupError would print the repr of the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Entry:
    """A registered component: the callable that builds it and its typed config."""

    key: str
    obj: Callable[..., Any]
    config: type
    module: str

    @property
    def origin(self) -> str:
        """Where the key is defined: ``module.QualifiedName``."""
        return f"{self.module}.{getattr(self.obj, '__qualname__', self.obj)}"


class Registry:
    """Keys to components of one kind (encoder, llm, method, ...).

    Args:
        kind: singular name used in messages and recipes, e.g. ``"encoder"``.
        modules: built-in key -> module that registers it (imported on look-up).
        plural: used for messages and for the entry-point group
            ``agentcir.<plural>``; defaults to ``kind + "s"``.
    """

    def __init__(self, kind: str, modules: Mapping[str, str] | None = None, *, plural: str | None = None):
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.group = f"agentcir.{self.plural}"
        self._lazy: dict[str, str] = dict(modules or {})
        self._entries: dict[str, Entry] = {}
        self._plugins: dict[str, str] | None = None
        self._lock = threading.RLock()

    # -- registration -------------------------------------------------------------
    def register(self, key: str, *, config: type | None = None) -> Callable[[Any], Any]:
        """Class/function decorator registering ``obj`` under ``key``.

        The config dataclass is ``config`` or the decorated class's ``Config``.
        """
        if not isinstance(key, str) or not key:
            raise RegistryError(f"{self.kind} keys must be non-empty strings, got {key!r}")

        def deco(obj: Any) -> Any:
            cfg = config if config is not None else getattr(obj, "Config", None)
            if cfg is None or not (isinstance(cfg, type) and dataclasses.is_dataclass(cfg)):
                raise TypeError(
                    f"{self.kind} '{key}' ({getattr(obj, '__qualname__', obj)}) needs a Config dataclass: "
                    "define `@dataclass class Config` on it or pass register(key, config=...)"
                )
            entry = Entry(key, obj, cfg, getattr(obj, "__module__", "?"))
            with self._lock:
                old = self._entries.get(key)
                if old is not None and old.origin != entry.origin:
                    raise RegistryError(
                        f"duplicate {self.kind} key '{key}': already registered by {old.origin}, "
                        f"registered again by {entry.origin}"
                    )
                self._entries[key] = entry
            return obj

        return deco

    # -- look-up ------------------------------------------------------------------
    def _plugin_modules(self) -> dict[str, str]:
        if self._plugins is None:
            found: dict[str, str] = {}
            for ep in metadata.entry_points(group=self.group):
                if ep.name in self._lazy:
                    raise RegistryError(
                        f"duplicate {self.kind} key '{ep.name}': built in ({self._lazy[ep.name]}) "
                        f"and declared again by plugin entry point {ep.value!r} in group '{self.group}'"
                    )
                found[ep.name] = ep.value.split(":", 1)[0].strip()
            self._plugins = found
        return self._plugins

    def _module_for(self, key: str) -> str | None:
        return self._lazy.get(key) or self._plugin_modules().get(key)

    def keys(self) -> list[str]:
        """Every key that can be looked up (built-in, plugin, or registered at run time)."""
        return sorted(set(self._lazy) | set(self._plugin_modules()) | set(self._entries))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def get(self, key: str) -> Entry:
        """Return the entry for ``key``, importing only the module that defines it."""
        entry = self._entries.get(key)
        if entry is not None:
            return entry
        module = self._module_for(key) if isinstance(key, str) else None
        if module is None:
            avail = ", ".join(self.keys()) or "(none)"
            raise RegistryError(f"unknown {self.kind} '{key}'; available {self.plural}: {avail}")
        importlib.import_module(module)
        entry = self._entries.get(key)
        if entry is None:
            raise RegistryError(
                f"{self.kind} '{key}' is declared in module '{module}', but importing it did not register it "
                f"(expected @{self.plural.upper()}.register('{key}') there)"
            )
        return entry

    def config_class(self, key: str) -> type:
        """The ``Config`` dataclass registered with ``key`` (imports its module)."""
        return self.get(key).config

    def build(self, key: str, config: Any = None, /, **deps: Any) -> Any:
        """Build the component ``key`` from a Config instance or a mapping of its fields.

        A mapping is type-checked against the Config dataclass (see
        :func:`agentcir.registry.config.make_config`). ``deps`` are injected
        components (e.g. ``encoder=``) for components that declare ``requires``.
        """
        from .config import make_config

        entry = self.get(key)
        if not isinstance(config, entry.config):
            config = make_config(entry.config, config or {}, where=f"{self.kind} '{key}'")
        obj = entry.obj(config, **deps)
        try:
            obj.registry_key = key
        except AttributeError:  # objects with __slots__ or builtins: fine, nothing to record
            pass
        return obj

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, keys={self.keys()})"
