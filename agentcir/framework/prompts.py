"""Prompts are data: text files found by name on a search path (or given as a path).

A prompt is named by its path relative to a prompts folder without ``.txt``
(``tasks/refine``, ``my_plugin/critique``), or given as a path to a ``.txt`` file.
Placeholders are ``{{name}}``; every other brace (JSON examples) is left alone. The sha256
of the file is part of every cache key of a component that uses it.

The search path (:func:`prompt_dirs`), first match wins:

1. the project's prompts, ``agentcir/recipes/prompts`` (so no plugin can change what a
   built-in method's prompt says);
2. folders added with :func:`add_prompt_dir`, in the order added;
3. the folders of the environment variable ``AGENTCIR_PROMPTS`` (separated by ``os.pathsep``);
4. installed plugins: each entry point of the group ``agentcir.prompts`` names a package whose
   folder holds prompt files (``my_prompts = my_plugin.prompts``).

A plugin should keep its prompts in a folder named after it (``my_plugin/plan.txt``), so that
names never clash. A name found nowhere is an :class:`InputError` listing every place looked.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import InputError

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "recipes" / "prompts"
#: entry-point group of plugin prompt folders
ENTRY_POINT_GROUP = "agentcir.prompts"
ENV_VAR = "AGENTCIR_PROMPTS"
_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}|\[\[([A-Z][A-Z0-9_]*)\]\]")


def _var_name(m: re.Match) -> str:
    """``{{name}}`` -> ``name``; ``[[NAME]]`` (the placeholder style of some released prompt files,
    e.g. ImageScope's) -> ``name``."""
    return m.group(1) or m.group(2).lower()


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str
    sha256: str

    @property
    def variables(self) -> set[str]:
        return {_var_name(m) for m in _VAR.finditer(self.text)}

    def render(self, variables: Mapping[str, Any] | None = None, **more: Any) -> str:
        values = {**(variables or {}), **more}
        missing = sorted(self.variables - set(values))
        if missing:
            raise InputError(
                f"prompt '{self.name}' needs variable(s) {', '.join(missing)}; given: {', '.join(sorted(values)) or '(none)'}"
            )
        return _VAR.sub(lambda m: _fmt(values[_var_name(m)]), self.text)


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "\n".join(f"- {x}" for x in v)
    return str(v)


_ADDED: list[Path] = []
_PLUGIN_DIRS: list[tuple[Path, str]] | None = None
_DIRS_LOCK = threading.Lock()


def add_prompt_dir(path: str | os.PathLike) -> Path:
    """Put folder ``path`` on the prompt search path (after the project's prompts); returns it resolved."""
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise InputError(f"add_prompt_dir: '{path}' is not a folder")
    with _DIRS_LOCK:
        if p not in _ADDED:
            _ADDED.append(p)
    return p


def remove_prompt_dir(path: str | os.PathLike) -> None:
    """Take a folder added with :func:`add_prompt_dir` off the search path (no-op if absent)."""
    p = Path(path).expanduser().resolve()
    with _DIRS_LOCK:
        if p in _ADDED:
            _ADDED.remove(p)


def _plugin_dirs(refresh: bool = False) -> list[tuple[Path, str]]:
    """(folder, entry point) of every ``agentcir.prompts`` entry point (read once; ``refresh`` again)."""
    global _PLUGIN_DIRS
    import importlib.util
    from importlib import metadata

    with _DIRS_LOCK:
        if _PLUGIN_DIRS is None or refresh:
            found = []
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
                module = ep.value.split(":", 1)[0].strip()
                try:
                    spec = importlib.util.find_spec(module)
                except (ImportError, ValueError):
                    spec = None
                locations = list(spec.submodule_search_locations or []) if spec else []
                if not locations:
                    raise InputError(
                        f"plugin prompt entry point '{ep.name} = {ep.value}' (group {ENTRY_POINT_GROUP}) "
                        f"does not name an importable package folder"
                    )
                found += [(Path(loc), f"plugin entry point '{ep.name}'") for loc in locations]
            _PLUGIN_DIRS = found
        return list(_PLUGIN_DIRS)


def prompt_dirs(refresh: bool = False) -> list[tuple[Path, str]]:
    """The search path: (folder, where it comes from), in the order searched (see the module docstring)."""
    env = [Path(d).expanduser() for d in os.environ.get(ENV_VAR, "").split(os.pathsep) if d.strip()]
    with _DIRS_LOCK:
        added = list(_ADDED)
    return [
        (PROMPTS_DIR, "the project's prompts"),
        *((d, "add_prompt_dir") for d in added),
        *((d, ENV_VAR) for d in env),
        *_plugin_dirs(refresh),
    ]


def find_prompt(name: str | Path) -> Path | None:
    """The file of prompt ``name`` (a ``.txt`` path, or a name on the search path), or ``None``."""
    p = Path(name)
    if p.suffix == ".txt" and p.is_file():
        return p
    if p.is_absolute():
        return Path(f"{name}.txt") if Path(f"{name}.txt").is_file() else None
    if not str(name) or ".." in p.parts:
        return None
    for d, _ in prompt_dirs():
        cand = d / f"{name}.txt"
        if cand.is_file():
            return cand
    return None


def prompt_path(name: str | Path) -> Path:
    """The file of prompt ``name``; not found is an :class:`InputError` listing every place looked
    and the prompts there."""
    found = find_prompt(name)
    if found is None:  # a plugin installed since the entry points were read: read them again
        prompt_dirs(refresh=True)
        found = find_prompt(name)
    if found is not None:
        return found
    places = []
    for d, origin in prompt_dirs():
        names = sorted(str(q.relative_to(d).with_suffix("")) for q in d.rglob("*.txt")) if d.is_dir() else []
        places.append(f"{d} ({origin}{'' if d.is_dir() else ', missing'}): {', '.join(names) or 'no prompts'}")
    hint = "" if Path(name).suffix != ".txt" else f" (and '{name}' is not a file)"
    raise InputError(
        f"prompt '{name}' not found{hint}; looked in:\n  "
        + "\n  ".join(places)
        + f"\nadd a folder with add_prompt_dir() or {ENV_VAR}, or ship it in a plugin "
        f"(entry-point group {ENTRY_POINT_GROUP})"
    )


_CACHE: dict[tuple[str, int, float], Prompt] = {}


def load_prompt(name: str | Path) -> Prompt:
    """Load a prompt by name or path (re-read when the file changes)."""
    path = prompt_path(name)
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime)
    hit = _CACHE.get(key)
    if hit is None:
        data = path.read_bytes()
        hit = Prompt(str(name), data.decode("utf-8"), hashlib.sha256(data).hexdigest())
        _CACHE[key] = hit
    return hit
