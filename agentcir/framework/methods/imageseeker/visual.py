"""Offline eyes: visual tags and yes/no checks from the encoder (zero-shot over vocabularies).

Without a vision-language model, ``view_photos`` shows each photo's caption (when a
captioner is configured) and its *visual tags*: the vocabulary terms (``articles``,
``objects``, ... of ``agentcir/data/vocab``) whose text embedding is closest to the photo's
image embedding. The same tags are the memory graph's visual clues, and the offline
planner verifies "does this photo show X?" by asking whether X ranks among the photo's
top terms when X competes with the vocabulary (X's own synonyms excluded from the
competition). This is as good as the encoder's zero-shot accuracy and no better.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...vocab import load_vocab

PROMPT = "a photo of {}"
_FUNCTION_WORDS = {
    "a",
    "an",
    "the",
    "of",
    "some",
    "any",
    "one",
    "pair",
    "pairs",
    "photo",
    "photos",
    "picture",
    "pictures",
}


@dataclass
class ClueVocabulary:
    """Synonym groups of the clue vocabularies and their text embeddings."""

    names: list[str]  # canonical term per group
    synonyms: list[tuple[str, ...]]
    emb: np.ndarray  # [G, d], L2-normalised

    @classmethod
    def terms(cls, vocabs: Sequence[str], vocab_dir: str | None = None) -> tuple[list[str], list[tuple[str, ...]]]:
        names, syns = [], []
        for v in vocabs:
            for canon, group in load_vocab(v, vocab_dir).terms.items():
                if canon not in names:
                    names.append(canon)
                    syns.append(group)
        return names, syns

    def group_of(self, phrase: str) -> set[int]:
        """Groups whose synonyms occur in ``phrase`` as whole words."""
        low = f" {' '.join(re.findall(r'[a-z0-9-]+', phrase.lower()))} "
        out = set()
        for g, group in enumerate(self.synonyms):
            if any(f" {s} " in low or f" {s}s " in low for s in group):
                out.add(g)
        return out

    def asks_more(self, phrase: str) -> bool:
        """Whether ``phrase`` names a vocabulary term *and* asks more than it ("red t-shirts for
        women": a colour and whom it is for). :meth:`rank_of` leaves the term's own group out of
        the competition, so it confirms any photo of the category and cannot check the rest; a
        phrase of vocabulary terms only ("a hat") or of none ("a helicopter") it checks as asked."""
        groups = self.group_of(phrase)
        if not groups:
            return False
        known = {w for g in groups for s in self.synonyms[g] for w in s.split()}
        words = re.findall(r"[a-z0-9-]+", phrase.lower())
        return any(
            w not in known and w[:-1] not in known and w[:-2] not in known and w not in _FUNCTION_WORDS for w in words
        )

    def tags(self, photo_emb: np.ndarray, top: int = 2) -> list[list[tuple[str, float]]]:
        """Top ``top`` terms per photo with their cosine."""
        if len(self.names) == 0:
            return [[] for _ in range(len(photo_emb))]
        s = np.asarray(photo_emb, np.float32) @ self.emb.T
        order = np.argsort(-s, axis=1, kind="stable")[:, :top]
        return [[(self.names[j], round(float(s[i, j]), 4)) for j in row] for i, row in enumerate(order)]

    def rank_of(self, photo_emb: np.ndarray, phrase: str, phrase_emb: np.ndarray) -> np.ndarray:
        """Rank (0 = best) of ``phrase`` among the vocabulary for each photo ``[n]``; the
        phrase's own synonym groups do not compete."""
        own = self.group_of(phrase)
        keep = [g for g in range(len(self.names)) if g not in own]
        photo_emb = np.asarray(photo_emb, np.float32)
        p = photo_emb @ np.asarray(phrase_emb, np.float32)
        if not keep:
            return np.zeros(len(photo_emb), np.int64)
        comp = photo_emb @ self.emb[keep].T
        return (comp > p[:, None]).sum(1)
