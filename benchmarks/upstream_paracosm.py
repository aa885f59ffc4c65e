"""Paracosm beside the authors' released code (leowangtong/Paracosm), on the same inputs and model outputs.

    python benchmarks/upstream_paracosm.py --paracosm PATH/TO/Paracosm                       # the check
    python benchmarks/upstream_paracosm.py --paracosm PATH --export-prompts DIR              # the authors' prompts

The check loads ``circo_extract_image_features``, ``cirr_extract_image_features`` and
``fashioniq_extract_image_features`` from the checkout's ``src/utils.py``, ``collate_fn`` from
``src/data_utils.py``, ``circo_generate_test_predictions``, ``circo_generate_test_dict``,
``cirr_generate_test_predictions`` and ``cirr_generate_test_dicts`` from ``test_cirr_circo.py`` and
``fiq_generate_val_predictions`` and ``fiq_compute_val_metrics`` from ``fashioniq_val.py`` (only those
definitions), with stand-ins below the code: CLIP returning this check's seeded *unnormalised* vectors
(their norms differ from item to item, as a real CLIP's do, so that the released sums of raw features
are exercised), ``clip.tokenize`` handing the texts through, data loaders in this process, the CPU. The
model outputs the released code reads from files (the mental images, their descriptions, the synthetic
counterparts of the gallery, CIRCO's composed texts) are made by scripted components, the editor
and describers given the authors' prompts (exported from their notebook); ``method=paracosm`` runs
with the same components and those prompts (``method.prompts=DIR``). Equal: the query vectors
(the released ``predicted_features + predicted_features_modi``), CIRCO's and CIRR's top-50 names per
query (CIRCO with the reference kept, CIRR with it removed, as released) and FashionIQ's R@10 / R@50
(both caption orders, the reference kept). Needs torch.

``--export-prompts DIR`` writes ``edit_shared.txt`` (the notebook's editing instruction),
``edit.txt`` (the same sentence without the shared-concept clause: the instruction of a query without
one), ``describe_mental.txt`` and ``describe_gallery.txt`` (the notebook's two Qwen2.5-VL prompts) with
this project's ``{{placeholders}}``; run Paracosm with them by ``method.prompts=DIR``.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import re
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _upstream import DIM, caption_of, image_table, load_defs, save_index_image, seed_of, text_vector  # noqa: E402

from agentcir.framework.interfaces import LLM, Editor, Encoder, Generator  # noqa: E402

MODIFICATIONS = [
    "is red and has long sleeves",
    "shows two dogs instead of one",
    "is taken at night",
    "has a floral print",
    "is seen from above",
    "the same in cotton",
    "without the logo",
    "is brighter with a collar",
] * 3
CONCEPTS = ["a dog", "a person skateboarding", "a red car", "a kitchen"]
N_GALLERY = 160


# -- the scripted world ------------------------------------------------------------------------------
def image_norm(index: int) -> float:
    return 0.5 + (index % 7) * 0.4


def text_norm(text: str) -> float:
    return 0.5 + (seed_of("norm", text) % 9) * 0.3


def raw_image(index: int) -> np.ndarray:
    return image_table(4096)[index] * np.float32(image_norm(index))


def raw_text(text: str) -> np.ndarray:
    return text_vector(text) * np.float32(text_norm(text))


def index_of_image(path) -> int:
    from PIL import Image

    with Image.open(path) as im:
        r, g, _ = im.convert("RGB").getpixel((0, 0))
    return r + 256 * g


class RawTableEncoder(Encoder):
    """Image = solid colour whose red/green values index the seeded table, scaled by a per-item norm;
    text = hashed vector scaled by a per-text norm (``encode_*`` normalise unless ``normalize=False``)."""

    registry_key = "upstream_raw_table"
    dim = DIM

    def _embed_images(self, images):
        return np.stack([raw_image(im.getpixel((0, 0))[0] + 256 * im.getpixel((0, 0))[1]) for im in images])

    def _embed_texts(self, texts):
        return np.stack([raw_text(t) for t in texts])


class Outputs:
    """The scripted model outputs, as files in ``root`` (both sides read the same)."""

    def __init__(self, root: Path):
        self.root = root

    def edit(self, image, instruction: str) -> Path:
        i = 1024 + seed_of("edit", Path(image).stem, instruction) % 1024
        return Path(save_index_image(self.root / "edits" / f"m{i}.png", i))

    def draw(self, description: str) -> Path:
        i = 2048 + seed_of("draw", description) % 1024
        return Path(save_index_image(self.root / "drawn" / f"s{i}.png", i))

    @staticmethod
    def describe(image, detailed: bool) -> str:
        stem = Path(image).stem
        return (
            f"A detailed view: {caption_of(stem)}, with more around it ({stem})."
            if detailed
            else f"a simple picture of {stem}"
        )

    @staticmethod
    def compose(modification: str, concept: str) -> str:
        return f"{concept}, and it {modification}"


class ScriptedEditor(Editor):
    registry_key = "upstream_editor"

    def __init__(self, cfg=None, *, outputs: Outputs | None = None, **deps):
        super().__init__(cfg, **deps)
        self.outputs = outputs

    def edit(self, image, instruction):
        return self.outputs.edit(image, instruction)


class ScriptedGenerator(Generator):
    registry_key = "upstream_generator"

    def __init__(self, cfg=None, *, outputs: Outputs | None = None, **deps):
        super().__init__(cfg, **deps)
        self.outputs = outputs

    def generate(self, description, *, reference=None):
        return self.outputs.draw(description)


class ScriptedVLM(LLM):
    registry_key = "upstream_vlm"

    def run_task(self, task, variables, *, prompt=None, images=(), json_mode=False):
        if task == "paracosm_compose":
            return Outputs.compose(variables["modification"], variables["shared_concept"])
        return Outputs.describe(images[0], detailed=task == "paracosm_describe_gallery")

    def chat(self, messages, *, tools=None, json_mode=False):  # pragma: no cover - not used
        raise NotImplementedError


# -- the authors' prompts ------------------------------------------------------------------------------
def notebook_prompts(checkout: Path) -> dict[str, str]:
    """The notebook's editing instruction and its two description prompts, with placeholders."""
    nb = json.loads((checkout / "Paracosm_demo.ipynb").read_text(encoding="utf-8"))
    edit = describe = None
    found: dict[str, str] = {}
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code":
            continue
        src = "".join(cell["source"])
        m = re.search(r"""prompt = f?["'](.*?: )(.*?)(, while strictly preserving ')(.*?)(' in the image\.)["']""", src)
        if m and edit is None:
            edit = m
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                if keys == ["type", "image"]:
                    describe = "mental" if isinstance(node.values[1], ast.Name) else "gallery"
                elif keys == ["type", "text"] and describe and isinstance(node.values[1], ast.Constant):
                    found.setdefault(describe, node.values[1].value)
    if edit is None or set(found) != {"mental", "gallery"}:
        raise SystemExit(
            f"{checkout}/Paracosm_demo.ipynb: the editing instruction or the two description prompts "
            f"were not found (found: {', '.join(found) or 'none'})"
        )
    shared = f"{edit.group(1)}{{{{modification}}}}{edit.group(3)}{{{{shared_concept}}}}{edit.group(5)}"
    return {
        "edit_shared.txt": shared,
        "edit.txt": f"{edit.group(1)}{{{{modification}}}}.",
        "describe_mental.txt": found["mental"],
        "describe_gallery.txt": found["gallery"],
    }


def export_prompts(checkout: Path, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, text in notebook_prompts(checkout).items():
        (out / name).write_text(text, encoding="utf-8")
        files.append(out / name)
    return files


# -- the released side -----------------------------------------------------------------------------
def released_functions(checkout: Path):
    import torch
    import torch.nn.functional as F
    import tqdm

    def DataLoader(*a, **k):  # in this process: the workers change nothing but speed
        return torch.utils.data.DataLoader(*a, **{**k, "num_workers": 0, "pin_memory": False})

    dl_ns = {"torch": torch}
    collate = load_defs(checkout / "src" / "data_utils.py", ["collate_fn"], dl_ns)["collate_fn"]
    clip = types.SimpleNamespace(tokenize=lambda texts, context_length=77, truncate=False: Tokens(list(texts)))
    ns = {
        "torch": torch,
        "F": F,
        "np": np,
        "DataLoader": DataLoader,
        "tqdm": tqdm.tqdm,
        "collate_fn": collate,
        "device": "cpu",
        "clip": clip,
    }
    fns = load_defs(
        checkout / "src" / "utils.py",
        ["circo_extract_image_features", "cirr_extract_image_features", "fashioniq_extract_image_features"],
        dict(ns),
    )
    fns.update(
        load_defs(
            checkout / "test_cirr_circo.py",
            [
                "circo_generate_test_predictions",
                "circo_generate_test_dict",
                "cirr_generate_test_predictions",
                "cirr_generate_test_dicts",
            ],
            dict(ns),
        )
    )
    fns.update(
        load_defs(checkout / "fashioniq_val.py", ["fiq_generate_val_predictions", "fiq_compute_val_metrics"], dict(ns))
    )
    return fns


class Tokens:
    """What the stand-in ``clip.tokenize`` returns: the texts, moved to a device as they are."""

    def __init__(self, texts: list[str]):
        self.texts = texts

    def to(self, device):
        return self


class Clip:
    """The released ``clip_model``: raw (unnormalised) features of image indices and texts."""

    def encode_image(self, images):
        import torch

        return torch.from_numpy(np.stack([raw_image(int(i)) for i in images.reshape(-1)]))

    def encode_text(self, tokens: Tokens):
        import torch

        return torch.from_numpy(np.stack([raw_text(t) for t in tokens.texts]))


class ListDataset:
    def __init__(self, rows: list[dict], split: str):
        self.rows, self.split = rows, split

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


# -- the world -------------------------------------------------------------------------------------
def make_world(root: Path, prompts: dict[str, str], dataset: str):
    from agentcir.framework.gallery import Gallery, GalleryItem
    from agentcir.framework.prompts import Prompt
    from agentcir.framework.types import Query

    rng = np.random.default_rng(seed_of("world", dataset))
    names = [f"g{i:04d}" for i in range(N_GALLERY)]
    paths = {n: save_index_image(root / "gallery" / f"{n}.png", i) for i, n in enumerate(names)}
    gallery = Gallery.build(
        root / "gallery_dir", [GalleryItem(n, paths[n]) for n in names], RawTableEncoder(), progress=False
    )
    refs = rng.choice(N_GALLERY, len(MODIFICATIONS), replace=False)  # one query per reference (CIRCO's keying)
    queries = []
    for i, mod in enumerate(MODIFICATIONS):
        ref, tgt = names[int(refs[i])], names[int((refs[i] + 1 + i) % N_GALLERY)]
        meta: dict = {}
        text = mod
        if dataset == "circo":
            meta["shared_concept"] = CONCEPTS[i % len(CONCEPTS)]
        if dataset == "fashioniq":
            caps = [mod, MODIFICATIONS[(i + 3) % len(MODIFICATIONS)] + "."]
            text = " and ".join(c.strip(".?, ") for c in caps)
            meta.update(captions=caps, text_reversed=" and ".join(c.strip(".?, ") for c in caps[::-1]))
        if dataset == "cirr":
            meta["members"] = [ref, tgt, *[n for n in names if n not in (ref, tgt)][i : i + 4]]  # 6 distinct, as CIRR's
        queries.append(Query(f"{i:03d}", text, reference=[paths[ref]], reference_id=ref, targets=[tgt], meta=meta))
    edit = {k: Prompt(k, prompts[k], "") for k in ("edit.txt", "edit_shared.txt")}
    return names, paths, gallery, queries, edit


def released_side(fns, outputs: Outputs, names, paths, queries, edit, dataset: str):
    """The released feature extraction and scoring over the scripted model outputs."""
    import torch

    def img(path) -> torch.Tensor:
        return torch.tensor([index_of_image(path)])

    classic = []
    for n in names:
        synthetic = outputs.draw(Outputs.describe(paths[n], detailed=True))
        classic.append({"image": img(paths[n]), "synthetic_img": img(synthetic), "image_name": n})
    extract = {
        "circo": "circo_extract_image_features",
        "cirr": "cirr_extract_image_features",
        "fashioniq": "fashioniq_extract_image_features",
    }[dataset]
    index_features, index_names = fns[extract](ListDataset(classic, "test"), Clip())
    relative = []
    for q in queries:
        concept = q.meta.get("shared_concept", "")
        instruction = (
            (edit["edit_shared.txt"] if concept else edit["edit.txt"])
            .render(modification=q.text, shared_concept=concept)
            .strip()
        )
        mental = outputs.edit(q.reference[0], instruction)
        des = Outputs.describe(mental, detailed=False)
        if dataset == "circo":
            relative.append(
                {
                    "mental_img": img(mental),
                    "mental_img_des": des,
                    "query_id": q.id,
                    "relative_caption": q.text,
                    "text_composed": Outputs.compose(q.text, concept),
                }
            )
        elif dataset == "cirr":
            relative.append(
                {
                    "mental_image": img(mental),
                    "mental_image_des": des,
                    "reference_name": q.reference_id,
                    "relative_caption": q.text,
                    "group_members": q.meta["members"],
                    "pair_id": int(q.id),
                }
            )
        else:
            relative.append(
                {
                    "mental_images": img(mental),
                    "mental_images_des": des,
                    "target_name": q.targets[0],
                    "mod_text": q.meta["captions"],
                }
            )
    rel = ListDataset(relative, "test")
    if dataset == "circo":
        p, pm, _ = fns["circo_generate_test_predictions"](Clip(), rel)
        top = fns["circo_generate_test_dict"](rel, Clip(), index_features, index_names)
        return (p + pm).numpy(), {"top50": [list(top[q.id]) for q in queries]}
    if dataset == "cirr":
        p, pm, *_ = fns["cirr_generate_test_predictions"](Clip(), rel)
        top, _group = fns["cirr_generate_test_dicts"](rel, Clip(), index_features, index_names)
        return (p + pm).numpy(), {"top50": [list(top[str(int(q.id))]) for q in queries]}
    p, pc, _ = fns["fiq_generate_val_predictions"](Clip(), rel)
    m = fns["fiq_compute_val_metrics"](rel, Clip(), index_features, index_names)
    return (p + pc).numpy(), {"R@10": m["fiq_recall_at10"], "R@50": m["fiq_recall_at50"]}


def ours_side(root: Path, outputs: Outputs, gallery, queries, prompts_dir: Path, dataset: str):
    from agentcir.framework.cache import CallCache
    from agentcir.framework.method import RunState
    from agentcir.framework.runner import RunContext, Runner
    from agentcir.registry import METHODS

    cfg = {
        "describer": "llm",
        "prompts": str(prompts_dir),
        "top_k": N_GALLERY,
        "query_text": {"circo": "composed", "cirr": "modification", "fashioniq": "both_orders"}[dataset],
        "exclude_reference": dataset == "cirr",
    }
    m = METHODS.build(
        "paracosm",
        cfg,
        encoder=RawTableEncoder(),
        editor=ScriptedEditor(outputs=outputs),
        generator=ScriptedGenerator(outputs=outputs),
        llm=ScriptedVLM(),
    )
    ctx = RunContext(
        cache=CallCache(root / f"cache-{dataset}.sqlite"),
        run_dir=root / f"run-{dataset}",
        concurrency=4,
        progress=False,
        kernels="reference",
    )
    state = RunState(queries=queries, gallery=gallery)
    asyncio.run(Runner(m, ctx, state).execute())
    ids = state.candidates.ids
    ranked = [[gallery.ids[r] for r in row if r >= 0] for row in ids]
    if dataset == "fashioniq":
        hits = [q.targets[0] in r[:k] for q, r in zip(queries, ranked) for k in (10, 50)]
        return state.arrays["paracosm_query"], {
            "R@10": 100.0 * float(np.mean(hits[0::2])),
            "R@50": 100.0 * float(np.mean(hits[1::2])),
        }
    return state.arrays["paracosm_query"], {"top50": [r[:50] for r in ranked]}


def check(checkout: Path) -> dict:
    """Both sides on CIRCO-, CIRR- and FashionIQ-shaped worlds; the differences per dataset."""
    fns = released_functions(checkout)
    out = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prompts_dir = tmp / "prompts"
        export_prompts(checkout, prompts_dir)
        prompts = {p.name: p.read_text(encoding="utf-8") for p in prompts_dir.iterdir()}
        outputs = Outputs(tmp / "outputs")
        for dataset in ("circo", "cirr", "fashioniq"):
            names, paths, gallery, queries, edit = make_world(tmp / dataset, prompts, dataset)
            q_theirs, theirs = released_side(fns, outputs, names, paths, queries, edit, dataset)
            q_ours, ours = ours_side(tmp / dataset, outputs, gallery, queries, prompts_dir, dataset)
            row = {"queries": len(queries), "query_vector_max_diff": float(np.abs(q_theirs - q_ours).max())}
            if "top50" in theirs:
                row["top50_lists_differing"] = sum(int(a != b) for a, b in zip(theirs["top50"], ours["top50"]))
            else:
                row["recall_diff"] = max(abs(theirs[k] - ours[k]) for k in ("R@10", "R@50"))
                row["R@10"], row["R@50"] = ours["R@10"], ours["R@50"]
            out[dataset] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paracosm", type=Path, required=True, help="a checkout of leowangtong/Paracosm")
    ap.add_argument("--export-prompts", type=Path, help="write the authors' prompts as prompt files into this folder")
    args = ap.parse_args(argv)
    if not (args.paracosm / "src" / "utils.py").is_file():
        ap.error(f"--paracosm {args.paracosm}: not a Paracosm checkout (no src/utils.py)")
    if args.export_prompts:
        for f in export_prompts(args.paracosm, args.export_prompts):
            print(f"wrote {f}")
        return 0
    import os

    os.environ.setdefault("TQDM_DISABLE", "1")  # the released loops' progress bars
    res = check(args.paracosm)
    print("| dataset | queries | max |q_released - q| | top-50 lists differing | recall difference |")
    print("|---|---|---|---|---|")
    bad = False
    for name, r in res.items():
        recall = f"{r['recall_diff']:.1e}" if "recall_diff" in r else ""
        print(
            f"| {name} | {r['queries']} | {r['query_vector_max_diff']:.2e} | {r.get('top50_lists_differing', '')} | "
            f"{recall} |"
        )
        # float32 rounding: the released recall is a float32 division
        bad |= (
            r["query_vector_max_diff"] > 1e-5 or bool(r.get("top50_lists_differing")) or r.get("recall_diff", 0) > 1e-4
        )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
