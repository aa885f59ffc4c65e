"""``detector=owlvit``: a transformers open-vocabulary detector (OWL-ViT, OWLv2) queried
with vocabulary labels. Extra: ``pip install 'agentcir[hf]'``.

The model is loaded lazily on the first call from a local folder saved with
``save_pretrained`` or a hub id already in the local hub cache.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...framework.errors import InputError, require
from ...framework.images import load_rgb
from ...framework.interfaces import Detector
from ...framework.vocab import VOCAB_DIR, load_vocab
from ...registry import DETECTORS
from ..captioners.hf import load_pretrained, model_fingerprint, quiet_transformers, torch_device
from ..captioners.zeroshot import check_prompt


@DETECTORS.register("owlvit")
class OwlViTDetector(Detector):
    """Open-vocabulary detection with ``AutoModelForZeroShotObjectDetection``.

    The text queries are ``query_prompt`` filled with each label: the explicit ``labels``
    when given, else every term of ``vocabularies``. Detections scoring at least
    ``threshold`` are returned best first (at most ``max_objects``; with
    ``best_per_label`` only the best box of each label).

    Config:
        model: local model folder or hub id (``google/owlvit-base-patch32``, ``google/owlv2-base-patch16``).
        revision: hub revision (identity only for hub ids).
        labels: explicit labels to look for (empty: the vocabularies' terms).
        vocabularies: vocabulary files whose terms are the labels when ``labels`` is empty.
        query_prompt: text query per label (``{}`` = the label).
        threshold: minimum detection score.
        max_objects: at most this many detections (0: all).
        best_per_label: keep only the best-scoring box of each label.
        device: ``cpu``, ``cuda``, ... or ``auto``.
        local_files_only: never try the hub (a local folder never does anyway).
        vocab_dir: folder of vocabulary files (empty: the bundled ones).
    """

    @dataclass
    class Config:
        model: str = "google/owlvit-base-patch32"
        revision: str = ""
        labels: list[str] = field(default_factory=list)
        vocabularies: list[str] = field(default_factory=lambda: ["objects"])
        query_prompt: str = "a photo of a {}"
        threshold: float = 0.1
        max_objects: int = 20
        best_per_label: bool = True
        device: str = "cpu"
        local_files_only: bool = False
        vocab_dir: str = ""

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        where = "detector 'owlvit'"
        check_prompt(self.cfg.query_prompt, f"{where}: field 'query_prompt'")
        self.labels = self._labels(where)
        self._loaded: tuple[Any, Any, str] | None = None
        self._lock = threading.Lock()

    def _labels(self, where: str) -> list[str]:
        if self.cfg.labels:
            labels = [str(x).strip() for x in self.cfg.labels if str(x).strip()]
        else:
            labels = []
            for v in self.cfg.vocabularies:
                labels.extend(t for t in load_vocab(v, self.cfg.vocab_dir or VOCAB_DIR).canonical if t not in labels)
        if not labels:
            raise InputError(f"{where}: no labels to look for (fields 'labels' and 'vocabularies' are empty)")
        return labels

    def model_identity(self) -> str:
        return f"{model_fingerprint(self.cfg.model, self.cfg.revision)}|{'|'.join(self.labels)}"

    def _load(self) -> tuple[Any, Any, str]:
        with self._lock:
            if self._loaded is None:
                transformers = require("transformers", "hf", feature="detector 'owlvit'")
                quiet_transformers()
                kw = {"revision": self.cfg.revision} if self.cfg.revision else {}
                where = "detector 'owlvit'"
                processor = load_pretrained(
                    transformers.AutoProcessor.from_pretrained,
                    self.cfg.model,
                    where=where,
                    local_files_only=self.cfg.local_files_only,
                    **kw,
                )
                model = load_pretrained(
                    transformers.AutoModelForZeroShotObjectDetection.from_pretrained,
                    self.cfg.model,
                    where=where,
                    local_files_only=self.cfg.local_files_only,
                    **kw,
                )
                device = torch_device(self.cfg.device)
                self._loaded = (processor, model.to(device).eval(), device)
            return self._loaded

    def detect(self, image: Path) -> list[dict]:
        import torch

        processor, model, device = self._load()
        im = load_rgb(image)
        queries = [[self.cfg.query_prompt.replace("{}", lb) for lb in self.labels]]
        inputs = processor(text=queries, images=im, return_tensors="pt", padding="max_length", truncation=True).to(
            device
        )
        with torch.inference_mode():
            outputs = model(**inputs)
        res = processor.post_process_grounded_object_detection(
            outputs, threshold=self.cfg.threshold, target_sizes=[(im.height, im.width)]
        )[0]
        dets = []
        for score, label, box in zip(res["scores"].tolist(), res["labels"].tolist(), res["boxes"].tolist()):
            x0, y0, x1, y1 = (min(max(v, 0.0), lim) for v, lim in zip(box, (im.width, im.height, im.width, im.height)))
            dets.append(
                {
                    "label": self.labels[int(label)],
                    "score": round(float(score), 6),
                    "box": [round(x0, 2), round(y0, 2), round(x1, 2), round(y1, 2)],
                }
            )
        dets.sort(key=lambda d: -d["score"])
        if self.cfg.best_per_label:
            seen: set[str] = set()
            dets = [d for d in dets if not (d["label"] in seen or seen.add(d["label"]))]
        return dets[: self.cfg.max_objects] if self.cfg.max_objects > 0 else dets
