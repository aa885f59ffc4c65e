"""Image preprocessing shared by every encoder backend and by its ONNX export.

A backend describes its preprocessing as a plain dict (a *spec*), so the torch encoder,
the trainer and the ONNX Runtime backend apply exactly the same pixels::

    {"mode": "square" | "shortest" | "stretch", "size": int, "crop": int, "resample": "bilinear" | "bicubic",
     "mean": [r, g, b], "std": [r, g, b]}

``square``: centre-crop to a square, resize to ``size`` (the catalog encoder).
``shortest``: resize the shorter side to ``size``, centre-crop ``crop`` x ``crop``
(CLIP's preprocessing, offsets and rounding as in transformers' image processors).
``stretch``: resize to ``size`` x ``size`` ignoring the aspect (SigLIP). Only numpy and Pillow are used.

Also here: :func:`import_torchvision` / :func:`torchvision_guard`, which keep a torchvision
built for another torch from breaking the transformers and open_clip imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
from typing import Any, Sequence

import numpy as np

from ...framework.errors import InputError

log = logging.getLogger(__name__)
_RESAMPLE = {"bilinear": 2, "bicubic": 3}  # PIL.Image.BILINEAR / BICUBIC


def _resample(name: str) -> int:
    try:
        return _RESAMPLE[name]
    except KeyError:
        raise InputError(f"preprocessing: resample must be one of {', '.join(_RESAMPLE)}, got '{name}'") from None


def square_pixels(image, size: int, resample: str = "bilinear") -> np.ndarray:
    """Centre-crop a PIL image to a square and resize it to ``size``: ``uint8 [size, size, 3]``."""
    w, h = image.size
    if w != h:
        s = min(w, h)
        left, top = (w - s) // 2, (h - s) // 2
        image = image.crop((left, top, left + s, top + s))
    if image.size != (size, size):
        image = image.resize((size, size), _resample(resample))
    return np.asarray(image, dtype=np.uint8)


def shortest_side_pixels(image, size: int, crop: int, resample: str = "bicubic") -> np.ndarray:
    """Resize the shorter side to ``size`` (aspect kept), centre-crop ``crop`` x ``crop``."""
    w, h = image.size
    if (w, h) != (size, size) and min(w, h) != size:
        if w <= h:
            nw, nh = size, max(1, int(h * size / w))
        else:
            nw, nh = max(1, int(w * size / h)), size
        image = image.resize((nw, nh), _resample(resample))
    w, h = image.size
    left, top = (w - crop) // 2, (h - crop) // 2
    if (left, top, w, h) != (0, 0, crop, crop):
        image = image.crop((left, top, left + crop, top + crop))
    return np.asarray(image, dtype=np.uint8)


def normalize_pixels(pixels: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """``uint8 [n, H, W, 3]`` -> ``float32 [n, 3, H, W]`` scaled to [0, 1], standardised per channel."""
    x = pixels.astype(np.float32) * np.float32(1 / 255)
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def preprocess(images: Sequence, spec: dict[str, Any]) -> np.ndarray:
    """PIL images -> ``float32 [n, 3, H, W]`` as described by ``spec`` (see the module doc)."""
    mode = spec.get("mode", "square")
    if mode == "square":
        pix = [square_pixels(im, int(spec["size"]), spec.get("resample", "bilinear")) for im in images]
    elif mode == "shortest":
        pix = [
            shortest_side_pixels(
                im, int(spec["size"]), int(spec.get("crop", spec["size"])), spec.get("resample", "bicubic")
            )
            for im in images
        ]
    elif mode == "stretch":
        size = int(spec["size"])
        pix = [
            np.asarray(
                im.resize((size, size), _resample(spec.get("resample", "bicubic"))) if im.size != (size, size) else im,
                dtype=np.uint8,
            )
            for im in images
        ]
    else:
        raise InputError(f"preprocessing: mode must be 'square', 'shortest' or 'stretch', got '{mode}'")
    return normalize_pixels(np.stack(pix), spec["mean"], spec["std"])


# -- torchvision -------------------------------------------------------------------------------------
#: torchvision ops whose schemas torchvision's import needs (it registers fake kernels for them)
_TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
)
_SHIM_LIB = None  # kept alive: dropping the Library object would remove the definitions
_IMPORT_LOCK = threading.Lock()


def import_torchvision():
    """Import torchvision, declaring the schemas of its compiled ops first when its ``_C``
    extension cannot load against this torch.

    Such a torchvision fails at import with "operator torchvision::nms does not exist", and
    so does transformers (it imports torchvision when installed). No encoder uses those ops
    (nms, roi_align: detection), so their schemas are declared without kernels and the
    import is retried. Called by the encoder backends only, never by the core.
    """
    global _SHIM_LIB
    with _IMPORT_LOCK:
        if "torchvision" in sys.modules and hasattr(sys.modules["torchvision"], "transforms"):
            return sys.modules["torchvision"]
        try:
            return importlib.import_module("torchvision")
        except RuntimeError as e:
            if "torchvision::" not in str(e):
                raise
            log.debug("torchvision's compiled ops do not load with this torch (%s); declaring their schemas", e)
        import torch

        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        lib = torch.library.Library("torchvision", "FRAGMENT")
        for schema in _TORCHVISION_SCHEMAS:
            if not torch._C._jit_get_schemas_for_operator(f"torchvision::{schema.split('(')[0]}"):
                lib.define(schema)
        _SHIM_LIB = lib
        return importlib.import_module("torchvision")


def torchvision_guard() -> None:
    """Before importing transformers: make an installed torchvision importable (it is imported
    by transformers when present); nothing happens when torchvision is not installed."""
    if importlib.util.find_spec("torchvision") is not None:
        import_torchvision()
