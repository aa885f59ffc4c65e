"""Fixtures for the vision component tests (captioners, generators, detectors, verifiers).

- ``ScriptedLLM``: an :class:`~agentcir.framework.interfaces.LLM` whose ``chat`` replies
  from a script and records every rendered prompt and image (so the real prompt files
  and ``run_task`` of the base class are exercised).
- ``WordEncoder``: a transparent :class:`~agentcir.framework.interfaces.Encoder`. A text
  is a bag of the vocabulary terms it contains (plus a "negated" dimension); an image
  is its dominant palette colour (the colour word and an object of that colour) plus
  an article read from its aspect ratio (square: t-shirt, tall: dress, wide: casual
  shoes). So tests know what the right tag, detection and verdict are, and can fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from agentcir.framework.interfaces import LLM, ChatReply, Encoder
from agentcir.framework.vocab import load_vocab

PALETTE = {  # colour word -> (rgb, object of that colour)
    "red": ((220, 20, 20), "apple"),
    "yellow": ((240, 230, 30), "banana"),
    "green": ((30, 200, 40), "broccoli"),
    "blue": ((20, 40, 220), "boat"),
    "orange": ((250, 140, 0), "orange"),
    "black": ((10, 10, 10), "tv"),
    "white": ((245, 245, 245), "sink"),
}
NEGATION_WORDS = ("not", "no", "without", "never")


def _terms() -> list[str]:
    terms: list[str] = []
    for v in ("colours", "articles", "genders", "usages", "patterns", "objects"):
        terms.extend(t for t in load_vocab(v).canonical if t not in terms)
    return terms


class WordEncoder(Encoder):
    @dataclass
    class Config:
        batch_size: int = 16
        bias: float = 0.05

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self.terms = _terms()
        self.index = {t: i for i, t in enumerate(self.terms)}
        self.dim = len(self.terms) + 2  # + negation + bias
        self.text_calls: list[list[str]] = []
        self.image_calls = 0
        self._patterns = sorted(self.terms, key=len, reverse=True)

    def _embed_texts(self, texts):
        self.text_calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            low = " " + t.lower() + " "
            for term in self._patterns:
                pat = rf"(?<![\w-]){re.escape(term)}(?![\w-])"
                if re.search(pat, low):
                    out[i, self.index[term]] = 1.0
                    low = re.sub(pat, " ", low)
            if any(re.search(rf"\b{w}\b", t.lower()) for w in NEGATION_WORDS):
                out[i, -2] = 1.0
            out[i, -1] = self.cfg.bias
        return out

    def _embed_images(self, images):
        self.image_calls += len(images)
        out = np.zeros((len(images), self.dim), np.float32)
        for i, im in enumerate(images):
            mean = np.asarray(im.convert("RGB"), np.float32).reshape(-1, 3).mean(0)
            colour = min(PALETTE, key=lambda c: float(np.sum((np.array(PALETTE[c][0]) - mean) ** 2)))
            out[i, self.index[colour]] = 1.0
            out[i, self.index[PALETTE[colour][1]]] = 1.0
            w, h = im.size
            article = "dress" if h > 1.3 * w else "casual shoes" if w > 1.3 * h else "t-shirt"
            out[i, self.index[article]] = 1.0
            out[i, -1] = self.cfg.bias
        return out


class ScriptedLLM(LLM):
    """Replies from ``script``: a list (one reply per call, in order) or a function of the
    rendered prompt text and image list."""

    @dataclass
    class Config:
        tag: str = "scripted"

    def __init__(self, cfg=None, *, script: list[str] | Callable[[str, list[str]], str] = (), **deps):
        super().__init__(cfg, **deps)
        self.script = list(script) if not callable(script) else script
        self.calls: list[dict] = []

    def chat(self, messages, *, tools=None, json_mode=False):
        content = messages[-1]["content"]
        if isinstance(content, str):
            text, images = content, []
        else:
            text = next(c["text"] for c in content if c["type"] == "text")
            images = [c["image"] for c in content if c["type"] == "image"]
        self.calls.append({"text": text, "images": images, "json_mode": json_mode})
        if callable(self.script):
            return ChatReply(self.script(text, images))
        if not self.script:
            raise AssertionError(f"ScriptedLLM: no reply left for prompt {text[:80]!r}")
        return ChatReply(self.script.pop(0))


@pytest.fixture
def word_encoder() -> WordEncoder:
    enc = WordEncoder()
    enc.registry_key = "word"
    return enc


@pytest.fixture
def toy_encoder(plugin_path):
    from agentcir.registry import ENCODERS

    return ENCODERS.build("toy", {})


def solid(path: Path, colour: str, size: tuple[int, int] = (32, 32)) -> Path:
    """A solid image of a palette colour (``size`` = width, height)."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, PALETTE[colour][0]).save(path)
    return path


def halves(path: Path, left: str, right: str, size: tuple[int, int] = (60, 60)) -> Path:
    """An image whose left half is one palette colour and right half another."""
    from PIL import Image

    im = Image.new("RGB", size, PALETTE[left][0])
    im.paste(Image.new("RGB", (size[0] // 2, size[1]), PALETTE[right][0]), (size[0] // 2, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path)
    return path


@pytest.fixture
def images(tmp_path) -> dict[str, Path]:
    d = tmp_path / "img"
    return {
        "red_tshirt": solid(d / "red_tshirt.png", "red"),
        "blue_tshirt": solid(d / "blue_tshirt.png", "blue"),
        "yellow_dress": solid(d / "yellow_dress.png", "yellow", (30, 60)),
        "green_shoes": solid(d / "green_shoes.jpg", "green", (60, 30)),
        "red_yellow": halves(d / "red_yellow.png", "red", "yellow"),
    }


@pytest.fixture
def paint():
    """``paint.solid(path, colour, size)`` / ``paint.halves(path, left, right, size)``."""
    from types import SimpleNamespace

    return SimpleNamespace(solid=solid, halves=halves)


@pytest.fixture
def scripted():
    """``scripted(script)`` -> a ScriptedLLM (see the module docstring)."""

    def make(script=(), **kw):
        llm = ScriptedLLM(script=script, **kw)
        llm.registry_key = "scripted"
        return llm

    return make


@pytest.fixture(autouse=True)
def _fresh_text_cache():
    """Each test starts with an empty process-wide prompt-embedding cache."""
    from agentcir.components.captioners import zeroshot

    zeroshot._TEXT_CACHE.clear()
    yield
    zeroshot._TEXT_CACHE.clear()


@pytest.fixture
def build_recipe(plugin_path, tmp_path):
    """``build_recipe(group, option, *overrides)``: compose ``recipes/<group>/<option>.yaml``,
    build the component through the ComponentPool with the test plugin's ``toy`` encoder
    and ``counting`` LLM as its dependencies, and return it."""
    from agentcir.framework.errors import InputError
    from agentcir.framework.recipe import ComponentPool, compose
    from agentcir.registry import ENCODERS, LLMS

    prebuilt = {"encoder": ENCODERS.build("toy", {}), "llm": LLMS.build("counting", {})}

    def build(group: str, option: str, *overrides: str):
        # the LLM is the prebuilt `counting` one; an endpoint LLM in the recipe passes the
        # compose-time check that the LLM serves what a vlm component needs (images)
        overrides = ("llm=openai", *overrides) if group != "llm" else overrides
        try:  # the group has a default in the recipe, or (not yet) none
            recipe = compose([f"{group}={option}", f"run.root={tmp_path}", *overrides])
        except InputError:
            recipe = compose([f"+{group}={option}", f"run.root={tmp_path}", *overrides])
        return ComponentPool(recipe, prebuilt=prebuilt).get(group)

    return build


@pytest.fixture(scope="module")
def torch_one_thread():
    """Tiny torch models run on one thread: on a shared 2-core machine torch's thread pool
    makes a 16x16 convolution ~100x slower than one thread does."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
