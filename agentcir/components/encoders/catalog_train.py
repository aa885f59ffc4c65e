"""Training of the catalog encoder's image tower (``agentcir train-encoder``).

LiT-style locked-text tuning (Zhai et al., "LiT: Zero-Shot Transfer with Locked-image text
Tuning", CVPR 2022, here with the text side locked): the MiniLM text tower is frozen, so the
description embeddings are computed once and cached on disk; only the image tower trains,
with a symmetric InfoNCE loss and a learnable temperature. Descriptions are built from a
catalog CSV (product name + attribute columns) in several phrasings; each step samples one
phrasing per product (caption variety is the largest lever). Items whose phrasing is
identical in a batch count as positives of each other.

Only ids in the ``train`` part of :func:`agentcir.framework.datasets.builder.split_of`
are trained on; the ``val`` part (the benchmark gallery) is used for the figures:
text->image Recall@1/5/10 for product descriptions and zero-shot top-1 accuracy of article
type and colour prompts. A run writes to ``out``::

    cache/          decoded pixels and text embeddings (reused by later runs)
    last.pt         full training state, saved after every epoch (a rerun resumes from it);
                    with ``members=N``: ``member-<m>/last.pt``, one per tower
    catalog.pt      the trained image tower (fp16; the ensemble of the members) + its metadata: load it with
                    ``encoder=catalog encoder.checkpoint=<out>/catalog.pt``
    metrics.json    final figures, throughput and per-epoch history
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...framework.errors import InputError
from ...framework.hashing import stable_hash
from ...framework.images import ImageDecodeError, Skipped, load_rgb, report_skipped
from ...framework.interfaces import l2_normalize
from ...registry.config import bounded
from . import catalog as C
from .common import square_pixels

log = logging.getLogger(__name__)

MEAN = (0.4815, 0.4578, 0.4082)
STD = (0.2686, 0.2613, 0.2758)
#: fields that may change between a run and its resumption
RESUMABLE_CHANGES = ("epochs", "progress", "num_threads", "out", "fresh", "eval_every")


@dataclass
class TrainConfig:
    """``agentcir train-encoder`` settings (recipe ``recipes/train/catalog.yaml``).

    Attributes:
        data: catalog folder holding the CSV and the photos.
        csv: attributes CSV, relative to ``data`` (or absolute).
        images: photo folder, relative to ``data`` (or absolute).
        image_pattern: photo file name from the id (``{id}.jpg``).
        id_column: CSV column of the item id (its hash decides the train/val split).
        name_column, type_column, colour_column, gender_column, usage_column: CSV columns
            the descriptions are built from ("" = the catalog has no such column).
        extra_columns: further attribute columns appended in one phrasing.
        out: output folder (cache, last.pt, catalog.pt, metrics.json).
        epochs: passes over the training ids.
        batch_size: images per step (and negatives per InfoNCE row).
        lr: peak AdamW learning rate (linear warm-up, then cosine decay).
        weight_decay: AdamW weight decay (not on norms, biases, temperature).
        warmup_epochs: linear warm-up length.
        image_size: input resolution of the image tower.
        widths, blocks, stem: image tower shape (channels and basic blocks per stage).
        members: towers trained one after the other with seeds ``seed``, ``seed + 1``, ...
            (each resumable in ``out/member-<m>``); the checkpoint is their ensemble, whose
            embedding is the mean of the members' unit-length embeddings (1 = a single tower).
        min_scale: smallest side fraction of the random crop (1 = no crop augmentation).
        temperature: initial softmax temperature (learned).
        full_weight: weight of a second InfoNCE term, against each product's full description
            (name + attributes), added every step to the term on a randomly drawn phrasing
            (text embeddings are precomputed, so the extra term costs almost nothing).
        bf16: bfloat16 autocast for the forward pass.
        channels_last: channels-last memory layout (faster convolutions on CPU).
        seed: seed of initialisation, batch order, phrasings and augmentation.
        eval_every: evaluate on the val ids every this many epochs (0 = only at the end).
        num_threads: torch CPU threads (0 = torch's default).
        progress: progress bar on stderr.
        fresh: ignore ``out/last.pt`` and start over.
    """

    data: str = ""
    csv: str = "products.csv"
    images: str = "images"
    image_pattern: str = "{id}.jpg"
    id_column: str = "id"
    name_column: str = "productDisplayName"
    type_column: str = "articleType"
    colour_column: str = "baseColour"
    gender_column: str = "gender"
    usage_column: str = "usage"
    extra_columns: list[str] = field(default_factory=lambda: ["subCategory", "season"])
    out: str = "runs/train-catalog"
    epochs: int = bounded(50, 1)
    batch_size: int = 256
    lr: float = 0.002
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    image_size: int = bounded(64, 8)
    widths: list[int] = bounded(lo=1, default_factory=lambda: [32, 64, 128, 256])
    blocks: list[int] = bounded(lo=1, default_factory=lambda: [1, 1, 1, 1])
    stem: int = bounded(32, 1)
    members: int = bounded(1, 1)
    min_scale: float = bounded(0.7, 0, 1.0, lo_open=True)
    temperature: float = bounded(0.07, 0, lo_open=True)
    full_weight: float = 0.0
    bf16: bool = True
    channels_last: bool = True
    seed: int = 0
    eval_every: int = 10
    num_threads: int = 0
    progress: bool = True
    fresh: bool = False


# -- descriptions ---------------------------------------------------------------------------------
def _clean(v: str | None) -> str:
    v = (v or "").strip()
    return "" if v.upper() in ("", "NA", "N/A", "NAN", "NONE") else v


@dataclass
class Product:
    id: str
    name: str = ""
    type: str = ""
    colour: str = ""
    gender: str = ""
    usage: str = ""
    extra: tuple[str, ...] = ()


def _words(p: Product) -> dict[str, str]:
    from ...framework.datasets.builder import _GENDER, article_phrase, with_article

    art = article_phrase(p.type) if p.type else "product"
    col = p.colour.lower()
    g = _GENDER.get(p.gender.lower(), (p.gender.lower(), p.gender.lower())) if p.gender else ("", "")
    thing = f"{col} {art}".strip()
    return {
        "art": art,
        "a_art": with_article(art),
        "col": col,
        "thing": thing,
        "a_thing": with_article(thing),
        "g": g[0],
        "gp": g[1],
        "use": p.usage.lower(),
    }


def descriptions(p: Product) -> list[str]:
    """The phrasings of one product (attribute-only, sentence-like, name + attributes).

    Parts the catalog lacks are left out; the list is never empty.
    """
    w = _words(p)
    out = []
    if p.name:
        out.append(p.name)
    out += [w["a_thing"], f"a photo of {w['a_thing']}"]
    if p.type:
        out.append(w["art"])
    if w["col"]:
        out += [f"something {w['col']}", f"a {w['col']} product"]
    if w["g"]:
        out += [f"{w['gp']} {w['thing']}", f"{w['a_thing']} for {w['g']}"]
    if w["use"]:
        out += [f"a {w['use']} {w['thing']}"]
    attrs = [a for a in (p.type, p.colour, p.gender, p.usage, *p.extra) if a]
    if attrs:
        out.append(", ".join(a.lower() for a in attrs))
    out.append(full_description(p))
    return list(dict.fromkeys(s for s in out if s.strip()))


def full_description(p: Product) -> str:
    """The one product description used as the text->image query in the evaluation."""
    w = _words(p)
    detail = ", ".join(x for x in (w["thing"], w["use"], f"for {w['g']}" if w["g"] else "") if x)
    return f"{p.name} ({detail})" if p.name else detail


TYPE_PROMPTS = ("a photo of {a_art}", "{a_art}", "a product photo of {a_art}")
COLOUR_PROMPTS = ("a photo of something {col}", "a {col} product", "{col}")


def class_prompts(kind: str, value: str) -> list[str]:
    """Zero-shot prompts (an ensemble, averaged) for an article type or a colour."""
    if kind == "type":
        w = _words(Product("", type=value))
        return [t.format(**w) for t in TYPE_PROMPTS]
    w = _words(Product("", colour=value))
    return [t.format(**w) for t in COLOUR_PROMPTS]


def read_products(cfg: TrainConfig) -> tuple[list[Product], dict[str, Path]]:
    """Products of the CSV whose photo exists, and their photo paths."""
    data = Path(cfg.data)
    if not cfg.data or not data.is_dir():
        raise InputError(
            f"train-encoder: data folder '{cfg.data}' not found (set data=FOLDER holding "
            f"'{cfg.csv}' and '{cfg.images}/')"
        )
    csv_path, img_dir = data / cfg.csv, data / cfg.images
    if not csv_path.is_file():
        raise InputError(f"train-encoder: attributes CSV '{csv_path}' not found")
    if not img_dir.is_dir():
        raise InputError(f"train-encoder: image folder '{img_dir}' not found")
    with open(csv_path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        cols = reader.fieldnames or []
        named = [
            cfg.id_column,
            cfg.name_column,
            cfg.type_column,
            cfg.colour_column,
            cfg.gender_column,
            cfg.usage_column,
            *cfg.extra_columns,
        ]
        missing = [c for c in named if c and c not in cols]
        if missing:
            raise InputError(
                f"train-encoder: CSV '{csv_path}' lacks column(s) {', '.join(missing)} "
                f"(has: {', '.join(cols)}); set the *_column fields to the catalog's names or ''"
            )
        rows = list(reader)
    get = lambda r, c: _clean(r.get(c)) if c else ""  # noqa: E731
    products, paths, absent = [], {}, 0
    for r in rows:
        pid = get(r, cfg.id_column)
        if not pid:
            continue
        path = img_dir / cfg.image_pattern.format(id=pid)
        if not path.is_file():
            absent += 1
            continue
        products.append(
            Product(
                pid,
                get(r, cfg.name_column),
                get(r, cfg.type_column),
                get(r, cfg.colour_column),
                get(r, cfg.gender_column),
                get(r, cfg.usage_column),
                tuple(x for x in (get(r, c) for c in cfg.extra_columns) if x),
            )
        )
        paths[pid] = path
    if absent:
        log.warning("train-encoder: %d CSV row(s) have no photo in '%s' (skipped)", absent, img_dir)
    if not products:
        raise InputError(f"train-encoder: no CSV row of '{csv_path}' has a photo in '{img_dir}'")
    return products, paths


# -- cached inputs ------------------------------------------------------------------------------------
def _atomic_save(path: Path, array: np.ndarray) -> None:
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, array)
    tmp.replace(path)


def cached_pixels(
    products: list[Product], paths: dict[str, Path], size: int, cache: Path, progress: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``uint8 [n, S, S, 3]`` of every decodable photo and the mask of decodable products,
    decoded once and cached under ``cache``."""
    from tqdm.auto import tqdm

    key = stable_hash([(p.id, str(paths[p.id])) for p in products], size, n=16)
    f, fm = cache / f"pixels-{size}-{key}.npy", cache / f"pixels-{size}-{key}.ok.npy"
    if f.is_file() and fm.is_file():
        return np.load(f), np.load(fm)
    out = np.zeros((len(products), size, size, 3), np.uint8)
    ok = np.zeros(len(products), bool)
    bad: list[Skipped] = []
    for i, p in enumerate(
        tqdm(products, desc=f"decoding photos ({size}px)", unit="img", disable=not progress, leave=False)
    ):
        try:
            out[i] = square_pixels(load_rgb(paths[p.id]), size)
            ok[i] = True
        except ImageDecodeError as e:
            bad.append(Skipped(i, str(paths[p.id]), str(e).split(": ", 1)[-1]))
    report_skipped(bad)
    cache.mkdir(parents=True, exist_ok=True)
    _atomic_save(f, out)
    _atomic_save(fm, ok)
    return out, ok


def cached_text_embeddings(texts: list[str], cache: Path, progress: bool, chunk: int = 512) -> np.ndarray:
    """Locked MiniLM embeddings of ``texts`` (``float16 [n, 384]``), computed once and cached
    (partial progress is kept, so an interrupted run resumes where it stopped)."""
    from tqdm.auto import tqdm

    key = stable_hash(texts, C.text_tower_identity(), n=16)
    f = cache / f"text-{key}.npy"
    if f.is_file():
        return np.load(f)
    part_dir = cache / f"text-{key}.parts"
    part_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    with tqdm(
        total=len(texts),
        desc="embedding descriptions (locked text tower)",
        unit="text",
        disable=not progress,
        leave=False,
    ) as bar:
        for c, start in enumerate(range(0, len(texts), chunk)):
            pf = part_dir / f"{c:05d}.npy"
            if not pf.is_file():
                _atomic_save(pf, C.embed_texts_minilm(texts[start : start + chunk]).astype(np.float16))
            parts.append(np.load(pf))
            bar.update(min(chunk, len(texts) - start))
    emb = np.concatenate(parts) if parts else np.zeros((0, C.TEXT_DIM), np.float16)
    _atomic_save(f, emb)
    for pf in part_dir.iterdir():
        pf.unlink()
    part_dir.rmdir()
    return emb


# -- evaluation (any encoder) ------------------------------------------------------------------------
def retrieval_metrics(
    image_emb: np.ndarray, products: Sequence[Product], encode_texts: Callable[[list[str]], np.ndarray]
) -> dict[str, float]:
    """Text->image Recall@1/5/10 (each product's full description must find its own photo)
    and zero-shot top-1 of article-type and colour prompt ensembles, over ``products``.

    ``image_emb`` rows are aligned with ``products`` (L2-normalised); class sets are the
    values present among ``products``; products without the attribute are left out.
    """
    img = l2_normalize(image_emb)
    out: dict[str, float] = {"n": float(len(products))}
    q = encode_texts([full_description(p) for p in products])
    sims = q @ img.T
    own = sims[np.arange(len(products)), np.arange(len(products))]
    rank = (sims > own[:, None]).sum(1)  # 0 = found first
    for k in (1, 5, 10):
        out[f"R@{k}"] = float((rank < k).mean())
    for kind, attr in (("type", "type"), ("colour", "colour")):
        have = [i for i, p in enumerate(products) if getattr(p, attr)]
        classes = sorted({getattr(products[i], attr) for i in have})
        if len(classes) < 2:
            continue
        prompts = [class_prompts(kind, c) for c in classes]
        flat = encode_texts([t for ps in prompts for t in ps])
        per = len(prompts[0])
        cls = l2_normalize(flat.reshape(len(classes), per, -1).mean(1))
        pred = (img[have] @ cls.T).argmax(1)
        truth = np.array([classes.index(getattr(products[i], attr)) for i in have])
        out[f"{kind}_top1"] = float((pred == truth).mean())
        out[f"{kind}_classes"] = float(len(classes))
    return out


def evaluate_encoder(encoder, cfg: TrainConfig, split: str = "val") -> dict[str, float]:
    """The figures of :func:`retrieval_metrics` for any registered encoder on the ``split`` ids
    of a catalog (photos are read and preprocessed by the encoder itself)."""
    from ...framework.datasets.builder import split_of

    products, paths = read_products(cfg)
    products = [p for p in products if split_of(p.id) == split]
    if not products:
        raise InputError(f"train-encoder: no '{split}' ids in '{cfg.data}'")
    skipped: list[Skipped] = []
    emb = encoder.encode_images([paths[p.id] for p in products], skipped=skipped)
    bad = {s.index for s in skipped}
    products = [p for i, p in enumerate(products) if i not in bad]
    return retrieval_metrics(emb, products, lambda t: encoder.encode_texts(t, progress=False))


# -- training --------------------------------------------------------------------------------------
def _config_dict(cfg: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def _schedule(step: int, total: int, warmup: int, lr: float) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return lr * (0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def _info_nce(scale, f, tids, text_emb):
    """Symmetric InfoNCE of image features ``f`` [B, d] against the texts ``tids``; rows whose
    texts are identical are all positives of each other."""
    import torch.nn.functional as F

    logits = scale * f @ text_emb[tids].T
    same = (tids[:, None] == tids[None, :]).float()
    target = same / same.sum(1, keepdim=True)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def augment(x, gen, min_scale: float):
    """Random crop-and-resize (zoom in to ``min_scale`` of the side, small aspect change,
    shift) and horizontal flip of a batch ``[B, 3, S, S]``, as one affine resampling.
    Colours are never changed (colour jitter destroys the colour labels)."""
    import torch
    import torch.nn.functional as F

    b = x.shape[0]
    if min_scale >= 1:
        flip = torch.where(torch.rand(b, generator=gen) < 0.5, -1.0, 1.0)
        return torch.where(flip.view(b, 1, 1, 1) < 0, x.flip(3), x)
    s = min_scale + (1 - min_scale) * torch.rand(b, generator=gen)
    r = torch.exp((torch.rand(b, generator=gen) - 0.5) * 0.2)
    sx, sy = (s * r).clamp(max=1.0), (s / r).clamp(max=1.0)
    tx = (torch.rand(b, generator=gen) * 2 - 1) * (1 - sx)
    ty = (torch.rand(b, generator=gen) * 2 - 1) * (1 - sy)
    flip = torch.where(torch.rand(b, generator=gen) < 0.5, -1.0, 1.0)
    theta = torch.zeros(b, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sx * flip, tx, sy, ty
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _check_resume(saved: dict[str, Any], cfg: TrainConfig, path: Path) -> None:
    now = _config_dict(cfg)
    defaults = _config_dict(TrainConfig())  # fields newer than the saved run keep their default
    was = {k: saved.get(k, defaults[k]) for k in now}
    diff = sorted(k for k in now if k not in RESUMABLE_CHANGES and was[k] != now[k])
    if diff:
        shown = ", ".join(f"{k}: {was[k]!r} -> {now[k]!r}" for k in diff)
        raise InputError(
            f"train-encoder: '{path}' is a run with other settings ({shown}); "
            f"rerun with the same settings to resume it, or use fresh=true or another out="
        )


def train(cfg: TrainConfig, *, on_epoch: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Train (or resume training of) the image tower; returns the final metrics.

    ``on_epoch(epoch)`` is called after each epoch's checkpoint is written (used by tests
    to interrupt a run).
    """
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    from ...framework.datasets.builder import split_of
    from .catalog_net import build_tower, n_params

    if cfg.epochs < 1 or cfg.batch_size < 2 or cfg.image_size < 16:
        raise InputError(
            f"train-encoder: need epochs >= 1, batch_size >= 2 and image_size >= 16 "
            f"(got {cfg.epochs}, {cfg.batch_size}, {cfg.image_size})"
        )
    if cfg.members < 1:
        raise InputError(f"train-encoder: members must be >= 1, got {cfg.members}")
    if cfg.full_weight < 0:
        raise InputError(f"train-encoder: full_weight must be >= 0, got {cfg.full_weight}")
    if not 0 < cfg.min_scale <= 1:
        raise InputError(f"train-encoder: min_scale must be in (0, 1], got {cfg.min_scale}")
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
    out = Path(cfg.out)
    cache = out / "cache"
    out.mkdir(parents=True, exist_ok=True)
    products, paths = read_products(cfg)
    pixels, ok = cached_pixels(products, paths, cfg.image_size, cache, cfg.progress)
    products = [p for p, k in zip(products, ok) if k]
    pixels = pixels[ok]
    is_train = np.array([split_of(p.id) == "train" for p in products])
    train_idx, val_idx = np.nonzero(is_train)[0], np.nonzero(~is_train)[0]
    if len(train_idx) < 2:
        raise InputError(f"train-encoder: only {len(train_idx)} training photo(s) in '{cfg.data}'")
    batch = min(cfg.batch_size, len(train_idx))

    # descriptions: a [n_train, K] table of indices into the unique texts, cycled to K columns
    per_item = [descriptions(products[i]) for i in train_idx]
    texts = sorted({t for d in per_item for t in d})
    tid = {t: j for j, t in enumerate(texts)}
    k = max(len(d) for d in per_item)
    table = np.array([[tid[d[j % len(d)]] for j in range(k)] for d in per_item], np.int64)
    full_ids = torch.tensor([tid[full_description(products[i])] for i in train_idx])
    text_emb = torch.from_numpy(cached_text_embeddings(texts, cache, cfg.progress).astype(np.float32))
    val_products = [products[i] for i in val_idx]
    val_texts = sorted(
        {full_description(p) for p in val_products}
        | {
            t
            for p in val_products
            for kind, v in (("type", p.type), ("colour", p.colour))
            if v
            for t in class_prompts(kind, v)
        }
    )
    val_emb = cached_text_embeddings(val_texts, cache, cfg.progress).astype(np.float32) if val_texts else None
    val_lookup = {t: j for j, t in enumerate(val_texts)}

    def encode_val_texts(ts: list[str]) -> np.ndarray:
        return l2_normalize(val_emb[[val_lookup[t] for t in ts]])

    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    fmt = torch.channels_last if cfg.channels_last else torch.contiguous_format
    steps = len(train_idx) // batch
    total = steps * cfg.epochs
    warmup = max(1, int(cfg.warmup_epochs * steps))
    arch = {
        "name": "resnet",
        "widths": list(cfg.widths),
        "blocks": list(cfg.blocks),
        "stem": cfg.stem,
        "dim": C.TEXT_DIM,
    }
    tower_params = n_params(build_tower(arch))

    def images(idx: np.ndarray) -> "torch.Tensor":
        x = torch.from_numpy(pixels[idx]).permute(0, 3, 1, 2).float().div_(255)
        return (x - mean) / std

    def fit(mcfg: TrainConfig, mdir: Path, bar) -> dict[str, Any]:
        """Train (or resume) one tower with ``mcfg`` (its own seed), checkpointing to ``mdir/last.pt``."""
        torch.manual_seed(mcfg.seed)
        model = build_tower(arch)
        logit_scale = torch.nn.Parameter(torch.tensor(math.log(1 / mcfg.temperature)))
        decay = [p for n, p in model.named_parameters() if p.ndim > 1]
        no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1] + [logit_scale]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": mcfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=mcfg.lr,
        )
        model = model.to(memory_format=fmt)
        start_epoch, history, train_s, seen = 0, [], 0.0, 0
        last = mdir / "last.pt"
        if last.is_file() and not mcfg.fresh:
            st = torch.load(last, map_location="cpu", weights_only=True)
            _check_resume(st["config"], mcfg, last)
            model.load_state_dict(st["model"])
            logit_scale.data.copy_(st["logit_scale"])
            opt.load_state_dict(st["opt"])
            start_epoch, history, train_s, seen = st["epoch"], json.loads(st["history"]), st["train_s"], st["seen"]
            log.info("train-encoder: resuming '%s' after epoch %d of %d", last, start_epoch, mcfg.epochs)
        bar.update(start_epoch * steps)

        def evaluate() -> dict[str, float]:
            if not len(val_idx):
                return {}
            model.eval()
            with torch.inference_mode():
                emb = np.concatenate(
                    [
                        model(images(val_idx[s : s + 512]).contiguous(memory_format=fmt)).float().numpy()
                        for s in range(0, len(val_idx), 512)
                    ]
                )
            model.train()
            return retrieval_metrics(emb, val_products, encode_val_texts)

        model.train()
        for epoch in range(start_epoch, mcfg.epochs):
            gen = torch.Generator().manual_seed(mcfg.seed * 100_003 + epoch)
            order = torch.randperm(len(train_idx), generator=gen).numpy()
            t0 = time.perf_counter()
            losses = []
            for s in range(steps):
                rows = order[s * batch : (s + 1) * batch]
                x = augment(images(train_idx[rows]), gen, mcfg.min_scale).contiguous(memory_format=fmt)
                choice = torch.randint(0, k, (len(rows),), generator=gen).numpy()
                tids = torch.from_numpy(table[rows, choice])
                for g in opt.param_groups:
                    g["lr"] = _schedule(epoch * steps + s, total, warmup, mcfg.lr)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mcfg.bf16):
                    f = model(x)
                f = F.normalize(f.float(), dim=-1)
                scale = logit_scale.exp().clamp(max=100)
                loss = _info_nce(scale, f, tids, text_emb)
                if mcfg.full_weight:
                    fids = full_ids[rows]
                    loss = (loss + mcfg.full_weight * _info_nce(scale, f, fids, text_emb)) / (1 + mcfg.full_weight)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(
                    epoch=epoch + 1, loss=f"{losses[-1]:.3f}", T=f"{1 / logit_scale.detach().exp().item():.3f}"
                )
            dt = time.perf_counter() - t0
            train_s += dt
            seen += steps * batch
            rec: dict[str, Any] = {
                "epoch": epoch + 1,
                "loss": float(np.mean(losses)),
                "images_per_s": steps * batch / dt,
            }
            if mcfg.eval_every and (epoch + 1) % mcfg.eval_every == 0 and epoch + 1 < mcfg.epochs:
                rec.update(evaluate())
                bar.set_postfix(
                    epoch=epoch + 1,
                    loss=f"{rec['loss']:.3f}",
                    type=f"{rec.get('type_top1', 0):.3f}",
                    colour=f"{rec.get('colour_top1', 0):.3f}",
                    R10=f"{rec.get('R@10', 0):.3f}",
                )
            history.append(rec)
            tmp = mdir / "last.pt.tmp"
            torch.save(
                {
                    "config": _config_dict(mcfg),
                    "epoch": epoch + 1,
                    "model": model.state_dict(),
                    "logit_scale": logit_scale.detach().clone(),
                    "opt": opt.state_dict(),
                    "history": json.dumps(history),
                    "train_s": train_s,
                    "seen": seen,
                },
                tmp,
            )
            tmp.replace(last)
            if on_epoch is not None:
                on_epoch(epoch + 1)
        return {
            "state": model.state_dict(),
            "temperature": 1 / logit_scale.detach().exp().item(),
            "history": history,
            "train_s": train_s,
            "seen": seen,
        }

    log.info(
        "train-encoder: %d train / %d val photos, %d phrasings (%d unique texts), %d tower(s) of %d "
        "parameters, %d steps of %d each",
        len(train_idx),
        len(val_idx),
        k,
        len(texts),
        cfg.members,
        tower_params,
        total,
        batch,
    )
    bar = tqdm(total=total * cfg.members, desc="train-encoder", unit="step", disable=not cfg.progress)
    towers = []
    for m in range(cfg.members):
        # member m: its own seed and folder (one tower: out itself), resumable on its own
        mdir = out if cfg.members == 1 else out / f"member-{m}"
        mdir.mkdir(parents=True, exist_ok=True)
        towers.append(fit(dataclasses.replace(cfg, seed=cfg.seed + m, members=1), mdir, bar))
    bar.close()

    # the shipped form: fp16 weights. The figures are then measured through the catalog encoder
    # loading exactly that file (its own decoding, preprocessing and fp32 text embeddings).
    if cfg.members > 1:
        arch = {"name": "ensemble", "members": [arch] * cfg.members}
    state = (
        towers[0]["state"]
        if cfg.members == 1
        else {f"members.{m}.{n}": v for m, t in enumerate(towers) for n, v in t["state"].items()}
    )
    half = {n: v.detach().to(torch.float16) if v.is_floating_point() else v.detach().clone() for n, v in state.items()}
    train_s, seen = sum(t["train_s"] for t in towers), sum(t["seen"] for t in towers)
    history = (
        towers[0]["history"]
        if cfg.members == 1
        else [{"member": m, **h} for m, t in enumerate(towers) for h in t["history"]]
    )
    metrics = {
        "val": {},
        "train_images": int(len(train_idx)),
        "val_images": int(len(val_idx)),
        "params": tower_params * cfg.members,
        "epochs": cfg.epochs,
        "members": cfg.members,
        "train_s": train_s,
        "images_per_s": seen / train_s if train_s else 0.0,
        "temperature": float(np.mean([t["temperature"] for t in towers])),
        "torch_threads": torch.get_num_threads(),
        "history": history,
    }
    ck = {
        "format": C.CHECKPOINT_FORMAT,
        "arch": arch,
        "image_size": cfg.image_size,
        "mean": list(MEAN),
        "std": list(STD),
        "text_tower": C.text_tower_identity(),
        "state_dict": half,
        "train_config": json.dumps(_config_dict(cfg)),
    }

    def write() -> None:
        ck["metrics"] = json.dumps({k: v for k, v in metrics.items() if k != "history"})
        tmp = out / "catalog.pt.tmp"
        torch.save(ck, tmp)
        tmp.replace(out / "catalog.pt")

    write()
    if len(val_idx):
        from ...registry import ENCODERS

        enc = ENCODERS.build("catalog", {"checkpoint": str(out / "catalog.pt"), "batch_size": 256})
        metrics["val"] = evaluate_encoder(enc, cfg)
        write()
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    (out / "CARD.md").write_text(model_card(cfg, metrics))
    return metrics


def model_card(cfg: TrainConfig, m: dict[str, Any]) -> str:
    """A markdown card of a trained checkpoint: data, recipe, measured figures."""
    v = m.get("val") or {}
    pct = lambda k: f"{100 * v[k]:.1f}%" if k in v else "n/a"  # noqa: E731
    num = lambda k: f"{v[k]:.3f}" if k in v else "n/a"  # noqa: E731
    default = _config_dict(compose_train_config())  # the recipe's values: the card lists what differs

    def show(val):
        if isinstance(val, list):
            return "[" + ",".join(str(x) for x in val) + "]"
        return str(val).lower() if isinstance(val, bool) else str(val)

    recipe = " ".join(
        f"{k}={show(val)}"
        for k, val in _config_dict(cfg).items()
        if k not in ("progress", "fresh", "out", "data") and val != default[k]
    )
    members = m.get("members", 1)
    tower = (
        f"ResNet-style CNN, widths {cfg.widths}, blocks {cfg.blocks}, {m['params']:,} parameters"
        if members == 1
        else f"an ensemble of {members} ResNet-style CNNs (seeds {cfg.seed}..{cfg.seed + members - 1}; each widths "
        f"{cfg.widths}, blocks {cfg.blocks}), {m['params']:,} parameters in all; the embedding is the "
        f"mean of the members' unit-length embeddings"
    )
    return f"""# catalog encoder checkpoint

- image tower: {tower},
  {cfg.image_size} px input, fp16 weights; text tower: MiniLM (`{C.text_tower_identity()}`), locked
- data: `{cfg.data}`, {m["train_images"]} training photos (ids with `split_of(id) == "train"`),
  {m["val_images"]} validation photos (`"val"`: never trained on)
- training: {f"{members} x " if members > 1 else ""}{m["epochs"]} epochs in {m["train_s"] / 60:.1f} min ({m["images_per_s"]:.0f} images/s,
  {m["torch_threads"]} torch thread(s)), final temperature {m["temperature"]:.4f}

## Figures on the validation photos

| metric | value |
|---|---|
| zero-shot article type top-1 ({int(v.get("type_classes", 0))} classes) | {pct("type_top1")} |
| zero-shot base colour top-1 ({int(v.get("colour_classes", 0))} classes) | {pct("colour_top1")} |
| text->image Recall@1 | {num("R@1")} |
| text->image Recall@5 | {num("R@5")} |
| text->image Recall@10 | {num("R@10")} |

Recall@k: each validation product's description (`full_description`: name + colour, type, usage,
gender) must retrieve its own photo among all {m["val_images"]} validation photos. Zero-shot: the
photo is assigned the class whose prompt ensemble (`TYPE_PROMPTS` / `COLOUR_PROMPTS` in
`catalog_train.py`) is nearest; classes are the values present among the validation products.

## Recipe

`recipes/train/catalog.yaml` with these overrides:

```
agentcir train-encoder data={cfg.data} {recipe}
```
"""


# -- recipe ------------------------------------------------------------------------------------------
def compose_train_config(
    overrides: Sequence[str] = (), config_name: str = "train/catalog", extra_dirs: Sequence[str] = ()
) -> TrainConfig:
    """``recipes/train/catalog.yaml`` with ``key=value`` overrides, type-checked."""
    from omegaconf import OmegaConf

    from ...framework.recipe import RECIPES_DIR, _hydra_compose
    from ...registry import make_config

    raw = OmegaConf.to_container(_hydra_compose(list(overrides), config_name, RECIPES_DIR, extra_dirs), resolve=True)
    raw.pop("hydra", None)
    return make_config(TrainConfig, raw, where="train-encoder")
