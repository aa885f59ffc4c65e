"""Components registered through entry points, for testing the registry and the runner.

- encoder ``toy``: image = normalised colour statistics, projected one image at a time (a batched
  BLAS product rounds a row differently with the batch's size on some CPUs), text = hashed words
  (no learning); a domain folder and a log of who embedded which batch, when asked.
- llm ``counting``: deterministic replies, a delay, and one line appended to a file per
  real call (so tests can count calls across processes).
- method ``llm_then_rank``: a per-query LLM stage, then an embedding ranking stage.
"""

import hashlib
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from agentcir.framework.interfaces import LLM, ChatReply, Encoder
from agentcir.framework.method import Method, Stage
from agentcir.framework.types import Candidates
from agentcir.registry import ENCODERS, LLMS, METHODS

DIM = 24


@ENCODERS.register("toy")
class ToyEncoder(Encoder):
    @dataclass
    class Config:
        batch_size: int = 16
        seed: int = 0
        domain: str = ""  # a folder of photos: its domain_sample (agentcir.framework.domain)
        log: str = ""  # a file: one line per image batch, naming the program that embedded it

    dim = DIM
    volatile_fields = (*Encoder.volatile_fields, "log")

    @property
    def domain_sample(self):
        return self.cfg.domain or None

    def _proj(self):
        return np.random.default_rng(self.cfg.seed).standard_normal((12, DIM)).astype(np.float32)

    def _embed_images(self, images):
        if self.cfg.log:
            with open(self.cfg.log, "a") as f:
                f.write(f"{os.path.basename(sys.argv[0])} {len(images)}\n")
        feats = []
        for im in images:
            a = np.asarray(im.resize((16, 16)), np.float32) / 255.0
            f = np.concatenate([a.mean((0, 1)), a.std((0, 1)), a[:8].mean((0, 1)), a[8:].mean((0, 1))])
            feats.append(f)
        proj = self._proj()
        return np.stack([f @ proj for f in feats])  # row by row: an image's vector does not depend on its batch

    def _embed_texts(self, texts):
        out = np.zeros((len(texts), DIM), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                h = int(hashlib.md5(w.encode()).hexdigest()[:8], 16)
                out[i, h % DIM] += 1.0 if (h >> 8) % 2 else -1.0
        return out + 1e-3


@LLMS.register("counting")
class CountingLLM(LLM):
    @dataclass
    class Config:
        counter: str = ""
        delay: float = 0.0
        suffix: str = "edited"

    def chat(self, messages, *, tools=None, json_mode=False):
        text = (
            messages[-1]["content"] if isinstance(messages[-1]["content"], str) else messages[-1]["content"][0]["text"]
        )
        time.sleep(self.cfg.delay)
        if self.cfg.counter:
            with open(self.cfg.counter, "a") as f:
                f.write(f"{os.getpid()} {text}\n")
        return ChatReply(f"{text} {self.cfg.suffix}")

    def run_task(self, task, variables, *, prompt=None, images=(), json_mode=False):
        return self.chat([{"role": "user", "content": f"{task}: {variables.get('text', '')}"}]).text


@METHODS.register("llm_then_rank")
class LLMThenRank(Method):
    requires = ("encoder", "llm")

    @dataclass
    class Config:
        top_k: int = 10

    def stages(self):
        return [Stage("rewrite", self._rewrite), Stage("rank", self._rank)]

    async def _rewrite(self, ctx, state):
        async def one(q):
            return {"rewritten": await ctx.call(self.llm, "run_task", task="rewrite", variables={"text": q.text})}

        await ctx.map(state, one)

    async def _rank(self, ctx, state):
        texts = [state.record(q, "rewrite")["rewritten"] for q in state.queries]
        emb = await ctx.call(self.encoder, "encode_texts", texts=texts)
        scores = emb @ np.asarray(state.gallery.image_emb, np.float32).T
        state.candidates = Candidates.from_scores(scores, self.cfg.top_k)
