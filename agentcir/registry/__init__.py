"""Every registry of agentcir, declared in this one file.

Each registry lists, for its built-in keys, the module that registers the key; the
module is imported only when the key is looked up (so ``import agentcir`` stays light).
Third-party packages add keys through the entry-point group ``agentcir.<plural>``
(``agentcir.encoders``, ``agentcir.llms``, ...): ``name = package.module``.
"""

from .config import ConfigError, make_config
from .registry import Entry, Registry, RegistryError

_C = "agentcir.components"
_F = "agentcir.framework"

ENCODERS = Registry("encoder", {
    "catalog": f"{_C}.encoders.catalog",
    "onnx": f"{_C}.encoders.onnx",
    "hf_clip": f"{_C}.encoders.hf_clip",
    "open_clip": f"{_C}.encoders.open_clip",
})

LLMS = Registry("llm", {
})

CAPTIONERS = Registry("captioner", {
})

GENERATORS = Registry("generator", {
})

DETECTORS = Registry("detector", {
})

VERIFIERS = Registry("verifier", {
})

MEMORIES = Registry("memory", {
    "call_cache": f"{_C}.memory.call_cache",
}, plural="memories")

METHODS = Registry("method", {
    "image_only": f"{_F}.methods.baselines",
    "text_only": f"{_F}.methods.baselines",
    "image_text_sum": f"{_F}.methods.baselines",
})

DATASETS = Registry("dataset", {
    "composed": f"{_F}.datasets.composed",
    "demo": f"{_F}.datasets.composed",
})

#: recipe group name -> registry, in the order components are built.
REGISTRIES: dict[str, Registry] = {
    "encoder": ENCODERS,
    "llm": LLMS,
    "captioner": CAPTIONERS,
    "generator": GENERATORS,
    "detector": DETECTORS,
    "verifier": VERIFIERS,
    "memory": MEMORIES,
    "method": METHODS,
    "dataset": DATASETS,
}

__all__ = [
    "Registry", "RegistryError", "Entry", "ConfigError", "make_config", "REGISTRIES",
    "ENCODERS", "LLMS", "CAPTIONERS", "GENERATORS", "DETECTORS", "VERIFIERS", "MEMORIES",
    "METHODS", "DATASETS",
]
