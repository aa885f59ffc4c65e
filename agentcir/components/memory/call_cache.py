"""The model-call cache as a Memory component (``memory=call_cache``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...framework.cache import CallCache
from ...framework.interfaces import Memory
from ...registry import MEMORIES


@MEMORIES.register("call_cache")
class CallCacheMemory(Memory):
    """Content-addressed sqlite cache of every model call.

    Config:
        path: sqlite file; default ``$AGENTCIR_CACHE`` or ``<run.root>/cache.sqlite``.
    """

    @dataclass
    class Config:
        path: str | None = None

    def open(self, default_path: str | os.PathLike) -> CallCache:
        path = self.cfg.path or os.environ.get("AGENTCIR_CACHE") or default_path
        return CallCache(Path(path).expanduser())
