"""Prompts are data: text files under ``agentcir/recipes/prompts`` (or any path).

A prompt is named by its path relative to the prompts folder without ``.txt``
(``octopus/modify``), or given as a path to a file. Placeholders are ``{{name}}``;
every other brace (JSON examples) is left alone. The sha256 of the file is part of
every cache key of a component that uses it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import InputError

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "recipes" / "prompts"
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
            raise InputError(f"prompt '{self.name}' needs variable(s) {', '.join(missing)}; given: {', '.join(sorted(values)) or '(none)'}")
        return _VAR.sub(lambda m: _fmt(values[_var_name(m)]), self.text)


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "\n".join(f"- {x}" for x in v)
    return str(v)


def prompt_path(name: str | Path) -> Path:
    p = Path(name)
    if p.suffix == ".txt" and p.is_file():
        return p
    cand = PROMPTS_DIR / f"{name}.txt"
    if cand.is_file():
        return cand
    avail = ", ".join(sorted(str(q.relative_to(PROMPTS_DIR).with_suffix("")) for q in PROMPTS_DIR.rglob("*.txt")))
    raise InputError(f"prompt '{name}' not found (neither a .txt file nor under {PROMPTS_DIR}); available: {avail}")


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
