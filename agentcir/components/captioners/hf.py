"""Helpers shared by the transformers / diffusers backends (``captioner=transformers``,
``detector=owlvit``, ``generator=diffusers``): model identity, loading with a clear
error, device and dtype."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from ...framework.errors import InputError
from ...framework.hashing import stable_hash
from ...registry import Choice

#: weight/config files of a saved model folder, hashed by content for the identity
_MODEL_SUFFIXES = {
    ".json",
    ".txt",
    ".model",
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".msgpack",
    ".h5",
    ".onnx",
}


def model_fingerprint(model: str, revision: str = "") -> str:
    """Identity of a model: for a local folder (or file) the sha256 of every weight and
    config file in it (memoised per file size and mtime), else the hub id and revision."""
    p = Path(model).expanduser()
    if p.is_file():
        return stable_hash(p, n=24)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in _MODEL_SUFFIXES)
        return stable_hash([(str(f.relative_to(p)), f) for f in files], n=24)
    return f"hub:{model}@{revision or 'main'}"


def load_pretrained(
    loader: Callable[..., Any], model: str, *, where: str, local_files_only: bool, **kwargs: Any
) -> Any:
    """``loader(model, ...)`` (a ``from_pretrained``), turning a missing or broken model into
    an :class:`InputError` that names the component, the model and what to do."""
    if not model:
        raise InputError(f"{where}: field 'model' is empty; set it to a local model folder or a hub id")
    local = Path(model).expanduser()
    path = str(local) if local.exists() else model
    try:
        return loader(path, local_files_only=local_files_only or local.exists(), **kwargs)
    except (OSError, ValueError) as e:
        first = " ".join(str(e).split())[:300]
        raise InputError(
            f"{where}: cannot load model '{model}' ({type(e).__name__}: {first}); give a folder saved "
            f"with save_pretrained, or a hub id whose files are in the local hub cache"
        ) from e


def torch_device(device: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; anything else as given."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class TorchDType(Choice):
    """The weight dtype of a transformers or diffusers model (config field ``dtype``)."""

    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


DTYPES = TorchDType.values()


def check_dtype(name: str, where: str) -> str:
    if name not in DTYPES:
        raise InputError(f"{where}: field 'dtype' must be one of {', '.join(DTYPES)}, got {name!r}")
    return name


def torch_dtype(name: str, where: str) -> Any:
    import torch

    return getattr(torch, check_dtype(name, where))


def quiet_transformers() -> None:
    """Silence transformers/diffusers info logs and weight-loading bars (our own bars remain)."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        from transformers.utils import logging as tlog

        tlog.set_verbosity_error()
        tlog.disable_progress_bar()
    except Exception:  # pragma: no cover - transformers absent or changed
        pass
