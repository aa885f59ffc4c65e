"""agentcir: training-free agentic image retrieval (OCTOPUS, XR, ImageSeeker and baselines).

The public Python API (:mod:`agentcir.api`)::

    import agentcir as ac

    recipe = ac.compose("method=xr", "dataset=demo")     # ac.load_recipe("my.yaml") reads a file
    result = ac.run(recipe)                              # result.metrics, .rankings, .dir
    ac.index("photos/", out="gallery/")                  # photo metadata (EXIF/XMP) included
    hits = ac.Retriever("gallery/").search(image="ref.jpg", text="in blue", k=5).hits
    ac.register("encoder", "mine")                       # a class decorator; then encoder=mine
    ac.list("method")                                    # registered names

Importing the package is light: no torch, numba, transformers, open_clip, faiss or hydra. The
names above load :mod:`agentcir.api` on first use (a module ``__getattr__``); components are
looked up through the registries in :mod:`agentcir.registry`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from . import _threads  # noqa: E402  (thread policy: best before numpy loads OpenBLAS)

_threads.apply()

#: public name -> (module, attribute), imported on first use
_LAZY = {
    "compose": ("agentcir.api", "compose"),
    "load_recipe": ("agentcir.api", "load_recipe"),
    "run": ("agentcir.api", "run"),
    "RunResult": ("agentcir.api", "RunResult"),
    "index": ("agentcir.api", "index"),
    "Retriever": ("agentcir.api", "Retriever"),
    "register": ("agentcir.api", "register"),
    "list": ("agentcir.api", "list_components"),
    "IndexReport": ("agentcir.framework.indexing", "IndexReport"),
    "SearchResult": ("agentcir.framework.search", "SearchResult"),
    "Hit": ("agentcir.framework.search", "Hit"),
    "Encoder": ("agentcir.framework.interfaces", "Encoder"),
    "LLM": ("agentcir.framework.interfaces", "LLM"),
    "Method": ("agentcir.framework.method", "Method"),
    "Stage": ("agentcir.framework.method", "Stage"),
    "AgentcirError": ("agentcir.framework.errors", "AgentcirError"),
    "InputError": ("agentcir.framework.errors", "InputError"),
    "ConfigError": ("agentcir.registry.config", "ConfigError"),
}

__all__ = [
    "LLM",
    "AgentcirError",
    "ConfigError",
    "Encoder",
    "Hit",
    "IndexReport",
    "InputError",
    "Method",
    "Retriever",
    "RunResult",
    "SearchResult",
    "Stage",
    "__version__",
    "compose",
    "index",
    "list",
    "load_recipe",
    "register",
    "run",
]

if TYPE_CHECKING:  # pragma: no cover  (type checkers and IDEs see the real names)
    from .api import Retriever, RunResult, compose, index, load_recipe, register, run
    from .api import list_components as list
    from .framework.errors import AgentcirError, InputError
    from .framework.indexing import IndexReport
    from .framework.interfaces import LLM, Encoder
    from .framework.method import Method, Stage
    from .framework.search import Hit, SearchResult
    from .registry.config import ConfigError


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'agentcir' has no attribute '{name}'") from None
    import importlib

    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
