"""``encoder=features``: image embeddings served from precomputed feature files.

A release's features (the OCTOPUS/CoVR ``preload/`` pickles, ``.npy`` + ids, parquet: the
layouts of :mod:`agentcir.framework.features`) stand in for an image tower. An image is
looked up by id:

- a feature reference ``features:<table>/<id>`` (what a dataset without media hands out,
  e.g. ``dataset=webvid_covr`` reading ``preload/``) names its table;
- a plain image path is looked up by its file stem, or its last folders and stem
  (``.../112/1016223877.jpg`` -> ``112/1016223877``: how folder datasets name items), in the
  table ``image_table`` (default: ``img_features`` when present, else the only table).

An id that no table holds is skipped and reported like an undecodable image. Texts go to
the encoder named in ``text`` (e.g. ``{name: open_clip, model: ViT-L-14, pretrained: FILE}``,
the weights the features were made with); without one, texts are refused with an error.

Identity: the files' content hash + ``arch`` (+ the text encoder's identity), so galleries
and the call cache treat these features like any other encoder.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Sequence

import numpy as np

from ...framework.errors import InputError
from ...framework.features import FeatureTable, files_identity, load_tables, parse_feature_ref
from ...framework.images import Skipped, report_skipped
from ...framework.interfaces import Encoder, l2_normalize
from ...registry import ENCODERS


@ENCODERS.register("features")
class FeaturesEncoder(Encoder):
    """Precomputed image features as an encoder (see the module docstring).

    Config:
        path: a feature file, or the folder of the tables (e.g. a release's ``preload/``).
        arch: the model that made them (e.g. ``ViT-L/14``); selects ``<table>/<arch>_*.pkl``
            (or ``<path>/<arch>/``) and joins the identity.
        image_table: the table plain image paths are looked up in (empty = ``img_features``
            when present, else the only table).
        text: the encoder for texts, as a recipe mapping (``name`` + its fields); empty =
            texts are refused.
    """

    #: the files count by content (model_identity), not by where they lie
    volatile_fields = (*Encoder.volatile_fields, "path")

    @dataclass
    class Config:
        path: str = ""
        arch: str = ""
        image_table: str = ""
        text: Dict[str, Any] = field(default_factory=dict)

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        if self.cfg.text and not isinstance(self.cfg.text.get("name"), str):
            raise InputError(
                "encoder 'features': field 'text' must name an encoder (text.name=open_clip ...), got "
                f"{dict(self.cfg.text)}"
            )
        if self.cfg.text.get("name") == "features":
            raise InputError("encoder 'features': field 'text' must name an encoder with a text tower, not 'features'")

    # -- files ----------------------------------------------------------------------------
    @functools.cached_property
    def tables(self) -> dict[str, FeatureTable]:
        if not self.cfg.path:
            raise InputError(
                "encoder 'features': field 'path' is empty (a feature file or folder, e.g. encoder.path=ROOT/preload)"
            )
        return load_tables(self.cfg.path, self.cfg.arch)

    @functools.cached_property
    def text_encoder(self) -> Encoder | None:
        if not self.cfg.text:
            return None
        spec = dict(self.cfg.text)
        return ENCODERS.build(spec.pop("name"), spec)

    def model_identity(self) -> str:
        text = self.text_encoder.identity if self.text_encoder is not None else ""
        if not self.cfg.path or not Path(self.cfg.path).expanduser().exists():  # any use says why
            return f"missing:{self.cfg.path}:{text}"
        return f"{files_identity(self.cfg.path, self.cfg.arch)}:{text}"

    @property
    def dim(self) -> int:  # type: ignore[override]
        return next(iter(self.tables.values())).dim

    def _image_table(self) -> str:
        t = self.cfg.image_table or ("img_features" if "img_features" in self.tables else "")
        if not t and len(self.tables) == 1:
            t = next(iter(self.tables))
        if t not in self.tables:
            raise InputError(
                f"encoder 'features': image_table '{t or '(unset)'}' is not one of the tables "
                f"{', '.join(self.tables)} under '{self.cfg.path}'; set encoder.image_table"
            )
        return t

    def _lookup(self, image) -> tuple[FeatureTable, int] | str:
        """(table, row) of ``image``, or why it has none."""
        ref = parse_feature_ref(image)
        if ref is not None:
            name, key = ref
            table = self.tables.get(name)
            if table is None:
                return f"no feature table '{name}' under '{self.cfg.path}' (tables: {', '.join(self.tables)})"
        elif isinstance(image, (str, Path)):
            table = self.tables[self._image_table()]
            parts = Path(image).with_suffix("").parts  # the id is the file stem, or its tail with folders ("112/10162")
            key = next(
                (k for k in ("/".join(parts[-n:]) for n in range(1, len(parts) + 1)) if table.row(k) >= 0),
                Path(image).stem,
            )
        else:
            raise InputError(
                f"encoder 'features' looks images up by id; it cannot embed a {type(image).__name__} "
                f"(pixels): use an encoder with an image tower"
            )
        row = table.row(key)
        return (table, row) if row >= 0 else f"no precomputed feature for id '{key}' in '{table.source}'"

    # -- encoder ----------------------------------------------------------------------------
    def encode_images(
        self,
        images: Sequence,
        batch_size: int | None = None,
        *,
        progress: bool | None = None,
        skipped: list[Skipped] | None = None,
        normalize: bool = True,
    ) -> np.ndarray:
        rows, bad = [], []
        for i, im in enumerate(images):
            hit = self._lookup(im)
            if isinstance(hit, str):
                bad.append(Skipped(i, str(im), hit))
            else:
                rows.append(hit[0].vectors[hit[1]])
        report_skipped(bad, "image(s) without features")
        if skipped is not None:
            skipped.extend(bad)
        if not rows:
            return np.zeros((0, self.dim), np.float32)
        return l2_normalize(np.stack(rows)) if normalize else np.stack(rows).astype(np.float32)

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        enc = self.text_encoder
        if enc is None:
            raise InputError(
                "encoder 'features' serves precomputed image features only: it has no text tower. "
                "Name the text encoder the features were made with, e.g. "
                "encoder.text.name=open_clip encoder.text.model=ViT-L-14 encoder.text.pretrained=FILE"
            )
        out = enc.encode_texts(texts, normalize=False)  # normalised by encode_texts unless asked otherwise
        if out.shape[1] != self.dim:
            raise InputError(
                f"encoder 'features': the text encoder '{enc.registry_key}' gives {out.shape[1]}-d "
                f"embeddings, the features under '{self.cfg.path}' are {self.dim}-d"
            )
        return out

    def close(self) -> None:
        if "text_encoder" in self.__dict__ and self.text_encoder is not None:
            self.text_encoder.close()
