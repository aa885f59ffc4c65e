"""Attribute vocabularies (``agentcir/data/vocab/*.txt``): canonical terms and their synonyms."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

VOCAB_DIR = Path(__file__).resolve().parent.parent / "data" / "vocab"


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Terms of one attribute: ``canonical -> synonyms`` (the canonical included)."""

    name: str
    terms: dict[str, tuple[str, ...]]

    @property
    def canonical(self) -> list[str]:
        return list(self.terms)

    def normalize(self, word: str) -> str | None:
        """The canonical term for ``word`` (any synonym, case-insensitive), or ``None``."""
        return self._lookup().get(word.strip().lower())

    def _lookup(self) -> dict[str, str]:
        table = self.__dict__.get("_table")
        if table is None:
            table = {s: c for c, syns in self.terms.items() for s in syns}
            object.__setattr__(self, "_table", table)
        return table

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """Non-overlapping mentions in ``text``: (start, end, canonical), longest synonyms first."""
        low = text.lower()
        taken = [False] * len(low)
        out = []
        for syn in sorted(self._lookup(), key=len, reverse=True):
            for m in re.finditer(rf"(?<![\w-]){re.escape(syn)}(?![\w-])", low):
                if not any(taken[m.start() : m.end()]):
                    out.append((m.start(), m.end(), self._lookup()[syn]))
                    for i in range(m.start(), m.end()):
                        taken[i] = True
        return sorted(out)


def load_vocab(name: str, vocab_dir: str | Path | None = None) -> Vocabulary:
    """Load ``<vocab_dir>/<name>.txt`` (default: the bundled vocabularies)."""
    return _load(name, str(vocab_dir or VOCAB_DIR))


@functools.cache
def _load(name: str, vocab_dir: str) -> Vocabulary:
    path = Path(vocab_dir) / f"{name}.txt"
    if not path.is_file():
        avail = ", ".join(sorted(p.stem for p in Path(vocab_dir).glob("*.txt")))
        raise InputError(f"vocabulary '{name}' not found in '{vocab_dir}' (available: {avail or 'none'})")
    terms: dict[str, tuple[str, ...]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p.strip().lower() for p in line.split("|") if p.strip()]
        terms[parts[0]] = tuple(dict.fromkeys(parts))
    return Vocabulary(name, terms)
