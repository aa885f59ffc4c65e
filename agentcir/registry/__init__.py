"""Every registry of agentcir, declared in this one file.

Each registry lists, for its built-in keys, the module that registers the key; the
module is imported only when the key is looked up (so ``import agentcir`` stays light).
Third-party packages add keys through the entry-point group ``agentcir.<plural>``
(``agentcir.encoders``, ``agentcir.llms``, ...): ``name = package.module``.
"""

from .config import Choice, ConfigError, make_config
from .registry import Entry, Registry, RegistryError

_C = "agentcir.components"
_F = "agentcir.framework"

ENCODERS = Registry(
    "encoder",
    {
        "catalog": f"{_C}.encoders.catalog",
        "onnx": f"{_C}.encoders.onnx",
        "hf_clip": f"{_C}.encoders.hf_clip",
        "open_clip": f"{_C}.encoders.open_clip",
        "features": f"{_C}.encoders.features",
    },
)

LLMS = Registry(
    "llm",
    {
        "openai": f"{_C}.llms.openai",
        "transformers": f"{_C}.llms.transformers",
        "rules": f"{_C}.llms.rules",
    },
)

CAPTIONERS = Registry(
    "captioner",
    {
        "vlm": f"{_C}.captioners.vlm",
        "transformers": f"{_C}.captioners.hf_captioner",
        "dataset": f"{_C}.captioners.dataset",
        "tagger": f"{_C}.captioners.tagger",
    },
)

GENERATORS = Registry(
    "generator",
    {
        "diffusers": f"{_C}.generators.diffusion",
        "openai_images": f"{_C}.generators.openai_images",
        "retrieval": f"{_C}.generators.retrieval",
        "none": f"{_C}.generators.none",
    },
)

EDITORS = Registry(
    "editor",
    {
        "openai_edits": f"{_C}.editors.openai_edits",
        "diffusers": f"{_C}.editors.diffusion",
        "recolour": f"{_C}.editors.standins",
        "none": f"{_C}.editors.standins",
    },
)

DETECTORS = Registry(
    "detector",
    {
        "vlm": f"{_C}.detectors.vlm",
        "owlvit": f"{_C}.detectors.owlvit",
        "crop_tagger": f"{_C}.detectors.crop_tagger",
    },
)

VERIFIERS = Registry(
    "verifier",
    {
        "vlm": f"{_C}.verifiers.vlm",
        "entailment": f"{_C}.verifiers.entailment",
        "contrast": f"{_C}.verifiers.contrast",
    },
)

MEMORIES = Registry(
    "memory",
    {
        "call_cache": f"{_C}.memory.call_cache",
        "subsets": f"{_C}.memory.subsets",
        "context": f"{_C}.memory.context",
    },
    plural="memories",
)

METHODS = Registry(
    "method",
    {
        "image_only": f"{_F}.methods.baselines",
        "text_only": f"{_F}.methods.baselines",
        "image_text_sum": f"{_F}.methods.baselines",
        "cirevl": f"{_F}.methods.baselines",
        "ldre": f"{_F}.methods.baselines",
        "octopus": f"{_F}.methods.octopus",
        "xr": f"{_F}.methods.xr",
        "paracosm": f"{_F}.methods.paracosm",
        "autocir": f"{_F}.methods.autocir",
        "imagescope": f"{_F}.methods.imagescope",
        "wiser": f"{_F}.methods.wiser",
        "imageseeker": f"{_F}.methods.imageseeker.agent",
        "history_topk": f"{_F}.methods.imageseeker.baseline",
    },
)

DATASETS = Registry(
    "dataset",
    {
        "composed": f"{_F}.datasets.composed",
        "demo": f"{_F}.datasets.composed",
        "fashion_cir": f"{_F}.datasets.composed",
        "fashioniq": f"{_F}.datasets.fashioniq",
        "cirr": f"{_F}.datasets.cirr",
        "circo": f"{_F}.datasets.circo",
        "webvid_covr": f"{_F}.datasets.webvid_covr",
        "disbench": f"{_F}.datasets.disbench",
    },
)

#: run loggers (experiment tracking), selected by ``run.loggers`` (not a recipe group):
#: agentcir/framework/tracking.py
LOGGERS = Registry(
    "logger",
    {
        "csv": f"{_F}.tracking",
        "tensorboard": f"{_F}.tracking",
        "mlflow": f"{_F}.tracking",
    },
)

#: recipe group name -> registry, in the order components are built.
REGISTRIES: dict[str, Registry] = {
    "encoder": ENCODERS,
    "llm": LLMS,
    "captioner": CAPTIONERS,
    "generator": GENERATORS,
    "editor": EDITORS,
    "detector": DETECTORS,
    "verifier": VERIFIERS,
    "memory": MEMORIES,
    "method": METHODS,
    "dataset": DATASETS,
}

__all__ = [
    "Registry",
    "RegistryError",
    "Entry",
    "Choice",
    "ConfigError",
    "make_config",
    "REGISTRIES",
    "ENCODERS",
    "LLMS",
    "CAPTIONERS",
    "GENERATORS",
    "EDITORS",
    "DETECTORS",
    "VERIFIERS",
    "MEMORIES",
    "METHODS",
    "DATASETS",
    "LOGGERS",
]
