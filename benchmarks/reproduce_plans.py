"""The model calls of every paper-row bundle (``agentcir run --plan``), written to docs/reproduce.md.

    python benchmarks/reproduce_plans.py [--work /tmp/agentcir-plans] [--queries 20]

No benchmark images exist here, so each gallery is made of placeholder files named by the
official ids (FashionIQ and CIRR: the split files; CIRCO: the official gallery size, 123,403,
with the ground-truth ids among synthetic ones; each file holds its own id so that no two
share content: the call cache keys images by content). The plan never decodes an image.
WebVid-CoVR uses the OCTOPUS release's query set (``../shared/data/releases/octopus-webvid-covr``).

Each row is planned on its first ``--queries`` queries; the gallery-wide stages (index,
gallery captions) are planned on the whole gallery. CIRCO's ablation rows are planned on a
3,000-image subset of the placeholder gallery (per-query calls do not depend on the gallery
size beyond the ranking depths) and take the gallery stages of the full-gallery main row.
The full-dataset estimate is gallery stages + per-query calls x (queries / planned queries).
Plans are cached as JSON under ``--work`` (delete a file to replan a row).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
RELEASE = SHARED / "releases" / "octopus-webvid-covr"
GALLERY_STAGES = ("index", "gallery_captions", "synthetic_gallery")  # synthetic_gallery: Paracosm's gallery-side pass

#: Table 3's ablation rows: bundle suffix -> what the row takes away
OCTOPUS_T3 = {
    "no_reasoning": "Without modification reasoning",
    "no_refinement": "Without semantic refinement",
    "no_textual_proxies": "Without textual proxies",
    "no_visual_proxy": "Without visual proxy",
    "no_creator": "Without the entire Creator",
    "v2v": "Vision-to-vision instead of bidirectional",
    "no_verification": "Without candidate verification",
}
ROWS: list[tuple[str, str, str]] = [  # (bundle, table, row); the paper's numbers are the bundle's run.paper
    ("octopus_t1_webvid", "OCTOPUS Table 1", "WebVid-CoVR (ViT-L/14)"),
    ("octopus_t1_fashioniq", "OCTOPUS Table 1/2", "FashionIQ average (ViT-L/14)"),
    ("octopus_t1_circo", "OCTOPUS Table 1", "CIRCO (ViT-L/14)"),
    ("octopus_t3_webvid_full", "OCTOPUS Table 3", "Full OCTOPUS, WebVid"),
    *[(f"octopus_t3_webvid_{k}", "OCTOPUS Table 3", f"{t}, WebVid") for k, t in OCTOPUS_T3.items()],
    ("octopus_t3_circo_full", "OCTOPUS Table 3", "Full OCTOPUS, CIRCO"),
    *[(f"octopus_t3_circo_{k}", "OCTOPUS Table 3", f"{t}, CIRCO") for k, t in OCTOPUS_T3.items()],
    ("octopus_webvid_release", "OCTOPUS, release files", "WebVid-CoVR from the release (no verification)"),
    ("xr_fashioniq_b32", "XR main", "FashionIQ average, ViT-B/32"),
    ("xr_cirr_b32", "XR main", "CIRR, ViT-B/32"),
    ("xr_circo_b32", "XR main", "CIRCO, ViT-B/32"),
    ("xr_fashioniq_l14", "XR main", "FashionIQ average, ViT-L/14"),
    ("xr_cirr_l14", "XR main", "CIRR, ViT-L/14"),
    ("xr_circo_l14", "XR main", "CIRCO, ViT-L/14"),
    *[
        (f"xr_ablation_{d}_{a}", "XR ablation", f"{label}, {dn}")
        for d, dn in (("fashioniq", "FashionIQ R@10"), ("cirr", "CIRR R_subset@3"), ("circo", "CIRCO mAP@25"))
        for a, label in (
            ("visual_sim", "+ visual similarity"),
            ("text_sim", "+ text similarity"),
            ("text_qa", "+ text QA"),
            ("visual_qa", "+ visual QA (full XR)"),
        )
    ],
    ("autocir_fashioniq", "AutoCIR main", "FashionIQ average, ViT-B/32"),
    ("imagescope_fashioniq_b32", "ImageScope CIR", "FashionIQ average, ViT-B/32"),
    ("imagescope_cirr_b32", "ImageScope CIR", "CIRR, ViT-B/32"),
    ("imagescope_circo_b32", "ImageScope CIR", "CIRCO, ViT-B/32"),
    ("imagescope_fashioniq_l14", "ImageScope CIR", "FashionIQ average, ViT-L/14"),
    ("imagescope_cirr_l14", "ImageScope CIR", "CIRR, ViT-L/14"),
    ("imagescope_circo_l14", "ImageScope CIR", "CIRCO, ViT-L/14"),
    ("wiser_circo_g14", "WISER main", "CIRCO test, ViT-G/14"),
    ("wiser_circo_l14", "WISER main", "CIRCO test, ViT-L/14"),
    ("wiser_cirr_g14", "WISER main", "CIRR test, ViT-G/14"),
    ("wiser_cirr_l14", "WISER main", "CIRR test, ViT-L/14"),
    ("wiser_fashioniq_g14", "WISER main", "FashionIQ average, ViT-G/14"),
    ("paracosm_circo_g14", "Paracosm main", "CIRCO, ViT-G/14"),
]
FULL_QUERIES = {"webvid": 2554, "fashioniq": 2017 + 2038 + 1961, "cirr": 4181, "circo": 220}
FASHIONIQ_GALLERY = {"dress": 3817, "all": 3817 + 6346 + 5373}


def dataset_of(bundle: str) -> str:
    return next(d for d in ("webvid", "fashioniq", "cirr", "circo") if d in bundle)


def placeholders(work: Path) -> dict[str, Path]:
    """Placeholder galleries named by the official ids (each file holds its id)."""
    ann = SHARED / "annotations"
    out = {"webvid": RELEASE}
    f = work / "fashioniq"
    if not (f / "done").is_file():
        (f / "images").mkdir(parents=True, exist_ok=True)
        for sub in ("captions", "image_splits"):
            shutil.copytree(ann / "fashion-iq" / sub, f / sub, dirs_exist_ok=True)
        for cat in ("dress", "shirt", "toptee"):
            names = set(json.load(open(ann / "fashion-iq" / "image_splits" / f"split.{cat}.val.json")))
            for c in json.load(open(ann / "fashion-iq" / "captions" / f"cap.{cat}.val.json")):
                names |= {c["candidate"], c["target"]}
            for n in names:
                (f / "images" / f"{n}.png").write_text(n)
        (f / "done").touch()
    out["fashioniq"] = f
    c = work / "cirr"
    if not (c / "done").is_file():
        for sub in ("captions", "image_splits"):
            shutil.copytree(ann / "cirr" / sub, c / sub, dirs_exist_ok=True)
        for name, rel in json.load(open(ann / "cirr" / "image_splits" / "split.rc2.val.json")).items():
            p = c / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(name)
        (c / "done").touch()
    out["cirr"] = c
    val = json.load(open(ann / "circo" / "annotations" / "val.json"))
    gt = set()
    for q in val:
        gt |= {int(q["reference_img_id"]), *map(int, q["gt_img_ids"])}
    for name, size in (("circo", 123403), ("circo_small", 3000)):
        o = work / name
        if not (o / "done").is_file():
            (o / "annotations").mkdir(parents=True, exist_ok=True)
            shutil.copy(ann / "circo" / "annotations" / "val.json", o / "annotations" / "val.json")
            ids, n = set(gt), 900000
            while len(ids) < size:
                ids.add(n)
                n += 1
            (o / "COCO2017_unlabeled" / "annotations").mkdir(parents=True, exist_ok=True)
            json.dump(
                {"images": [{"id": i, "file_name": f"{i:012d}.jpg"} for i in sorted(ids)]},
                open(o / "COCO2017_unlabeled" / "annotations" / "image_info_unlabeled2017.json", "w"),
            )
            g = o / "COCO2017_unlabeled" / "unlabeled2017"
            g.mkdir(parents=True, exist_ok=True)
            for i in ids:
                (g / f"{i:012d}.jpg").write_text(str(i))
            (o / "done").touch()
        out[name] = o
    return out


def source_bundle(bundle: str) -> str:
    """The bundle a row runs (Table 3's full rows are the Table 1 rows)."""
    return bundle.replace("t3", "t1").removesuffix("_full") if bundle.endswith("_full") else bundle


def paper_cell(bundle: str) -> str:
    """The paper's numbers of a row, as its bundle's ``run.paper`` states them (``agentcir eval
    --compare`` prints the same beside a run of it)."""
    import yaml

    from agentcir.framework.compare import parse_paper

    f = ROOT / "agentcir" / "recipes" / "experiment" / f"{source_bundle(bundle)}.yaml"
    text = (yaml.safe_load(f.read_text()).get("run") or {}).get("paper")
    if text is None:
        return "(no paper row)"
    numbers = parse_paper(text, f"{f.name} run.paper")[1]
    return ", ".join(f"{k} {v:.2f}" for k, v in numbers.items()) or "(not given)"


def command(bundle: str) -> str:
    """The row's command (what `agentcir run` is given; ROOT and FILE are the user's)."""
    weights = "encoder.text.pretrained=FILE" if bundle == "octopus_webvid_release" else "encoder.pretrained=FILE"
    return " ".join(bundle_args(bundle)) + f" dataset.root=ROOT {weights}"


def bundle_args(bundle: str) -> list[str]:
    if bundle.endswith("_full"):  # Table 3's full row is the Table 1 row
        return [f"+experiment={bundle.replace('t3', 't1').removesuffix('_full')}"]
    extra = ["encoder.text.name=open_clip", "encoder.text.model=ViT-L-14"] if bundle == "octopus_webvid_release" else []
    return [f"+experiment={bundle}", *extra]


def plan_row(bundle: str, roots: dict[str, Path], work: Path, queries: int) -> dict:
    from agentcir.framework.plan import plan_recipe
    from agentcir.framework.recipe import compose

    d = dataset_of(bundle)
    small = d == "circo" and not (
        bundle.startswith(("octopus_t1_", "xr_circo_", "imagescope_circo_", "wiser_circo_", "paracosm_circo_"))
        or bundle == "octopus_t3_circo_full"
    )
    root = roots["circo_small" if small else d]
    args = [
        *bundle_args(bundle),
        f"dataset.root={root}",
        f"dataset.limit={queries}",
        f"run.root={work / 'runs'}",
        "run.progress=false",
    ]
    plan = plan_recipe(compose(args, check_devices=False)).to_json()  # a plan runs no model: any device
    plan["command"] = "agentcir run " + command(bundle)
    plan["small_gallery"] = small
    return plan


def summary(bundle: str, plan: dict, plans: dict[str, dict]) -> tuple[str, str, str]:
    """(model calls for the full dataset, LLM tokens in/out, cost) of a row."""
    d = dataset_of(bundle)
    gallery = [r for r in plan["rows"] if r["stage"] in GALLERY_STAGES]
    if plan["small_gallery"]:
        main = (
            "octopus_t1_circo"
            if bundle.startswith("octopus")
            else ("xr_circo_l14" if "l14" in bundle else "xr_circo_b32")
        )
        gallery = [r for r in plans[main]["rows"] if r["stage"] in GALLERY_STAGES]
    gscale = FASHIONIQ_GALLERY["all"] / FASHIONIQ_GALLERY["dress"] if d == "fashioniq" else 1.0
    qscale = FULL_QUERIES[d] / max(1, plan["queries"])
    per: dict[str, float] = {}
    tin = tout = cost = 0.0
    priced = False
    for r, s in [
        *((r, gscale) for r in gallery),
        *((r, qscale) for r in plan["rows"] if r["stage"] not in GALLERY_STAGES),
    ]:
        comp = r["component"].split(":")[0]
        per[comp] = per.get(comp, 0) + r["calls"] * s
        if r["component"].startswith("llm:") or r.get("priced_as") == "llm":
            tin += r["input_tokens"] * s
            tout += r["output_tokens"] * s
        if r["cost"] is not None:
            cost += r["cost"] * s
            priced = True
    calls = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.5)
    return calls or "none", f"{tin / 1e6:.1f}M / {tout / 1e6:.2f}M", f"${cost:,.0f}" if priced else "local"


def render(summaries: dict[str, tuple[str, str, str]], queries: int) -> str:
    """docs/reproduce.md: per row of :data:`ROWS` its command and paper numbers (from the bundle)
    and ``summaries[bundle]`` = (model calls, tokens, cost) of :func:`summary` (rows without one:
    "(not planned)")."""
    out = [
        "# Reproducing the papers: one bundle per table row",
        "",
        "Every row is an experiment bundle (`agentcir/recipes/experiment/`). `ROOT` is the benchmark folder",
        "(its loader's layout: `agentcir/recipes/dataset/<name>.yaml`), `FILE` the CLIP weights (open_clip",
        "`ViT-L-14` or `ViT-B-32`, OpenAI weights). OCTOPUS rows call GPT-4o-mini (`OPENAI_API_KEY`) and",
        "Qwen-Image (a GPU); XR rows call InternVL3-8B behind an OpenAI-compatible server",
        "(`vllm serve OpenGVLab/InternVL3-8B`; `llm.base_url=...`). AutoCIR rows call GPT-4o-mini and BLIP-2",
        "OPT-6.7B (a GPU); ImageScope rows InternVL2-8B behind an OpenAI-compatible server, for all four of",
        "the paper's roles (docs/upstream.md). WISER rows call GPT-4o for its caption editor, refiner and",
        "verifier, and Qwen-Image-Edit (a GPU) as its image editor (docs/upstream.md); their CIRCO and CIRR",
        "numbers are the test splits, scored by the benchmarks' servers (`dataset.split=test` / `test1`,",
        "`agentcir eval RUN --submit DIR`). Paracosm rows run Qwen-Image-Edit and Qwen-Image (a GPU) and",
        "Qwen2.5-VL-7B behind an OpenAI-compatible server. FashionIQ rows are one category per run",
        "(`dataset.category=dress|shirt|toptee`): the paper's number is the mean of the three",
        "(`agentcir eval RUN_DRESS RUN_SHIRT RUN_TOPTEE --compare`).",
        "",
        "**Model calls** are what `agentcir run --plan ...` reports (no model is called): the gallery-wide",
        "stages (index, gallery captions, Paracosm's synthetic gallery: one description and one drawing per",
        "gallery image, made once per gallery and shared by every run over it) over the whole gallery, the",
        "per-query stages planned on the first",
        f"{queries} queries and scaled to the full query set (WebVid-CoVR 2,554 (the release's), FashionIQ val",
        "6,016 over three categories (galleries 15,536), CIRR val 4,181, CIRCO val 220 (gallery 123,403)).",
        "Verification counts are upper bounds (every gated query judged to its depth); which queries the",
        "uncertainty gate lets through depends on the real scores. Tokens: rendered prompts (~4 characters a",
        "token) plus 765 per image; the output count comes from the offline stand-in replies and only",
        "indicates the size. Cost: the bundle's `run.prices` (GPT-4o-mini $0.15 / $0.60 per million input /",
        "output tokens; Qwen-Image and InternVL3 run locally: no price). Regenerate with",
        "`python benchmarks/reproduce_plans.py`; plan any row yourself with",
        "`agentcir run --plan +experiment=ROW dataset.root=ROOT`: over the whole query set it counts every",
        f"query instead of scaling the first {queries}, so its counts differ from a row's where the calls per",
        "query vary (the uncertainty gate, the number of statements or propositions); with",
        f"`dataset.limit={queries}` it plans what the row was scaled from. The paper column is each bundle's",
        "`run.paper`, which `agentcir eval --compare` prints beside a run of the bundle.",
        "",
        "No row's number has been reproduced with the repository's own data: the benchmark images, the",
        "weights and the APIs are not part of it. What has been checked against the authors' code is the",
        "scoring ([methods](design/methods.md), [evaluation protocols](design/evaluation.md)) and, on the",
        "OCTOPUS release's own features, the WebVid-CoVR image-only baseline, for both",
        "architectures (`tests/framework/datasets/test_webvid_release.py`): ViT-L/14 R@1 38.53, R@5 62.69,",
        "R@10 71.81, R@50 89.23; ViT-B/32 R@1 32.30, R@5 55.52, R@10 64.06, R@50 82.18 (`agentcir run",
        "method=image_only dataset=webvid_covr dataset.root=REL encoder=features encoder.path=REL/preload",
        "encoder.arch=ViT-L/14`), with the same per-query ranks as the authors' `eval_recall`.",
        "",
        "| table | row | command | paper | model calls (full dataset) | LLM tokens in / out | cost |",
        "|---|---|---|---|---|---|---|",
    ]
    for bundle, table, row in ROWS:
        if bundle not in summaries:
            out.append(f"| {table} | {row} | `{command(bundle)}` | {paper_cell(bundle)} | (not planned) | | |")
            continue
        calls, tokens, cost = summaries[bundle]
        out.append(f"| {table} | {row} | `{command(bundle)}` | {paper_cell(bundle)} | {calls} | {tokens} | {cost} |")
    out += [
        "",
        "Notes. WebVid-CoVR rows are planned on the release's query set, whose references are one frame:",
        "with the videos, OCTOPUS captions `num_keyframes` (8) keyframes per reference and summarises them",
        "(8 captioner calls and one LLM call more per query). XR's fine filter asks each of its `k_prime` (100)",
        "candidates every true/false statement of its query, once on the image (verifier `check`) and once on",
        "the caption (an LLM task): its count is k' x statements per query; the statements planned here are",
        "the offline stand-in's, the paper's InternVL3 writes up to `num_questions` (3), i.e. up to 300 + 300",
        "calls per query. ImageScope's stage 2 asks each of its `k` (20) candidates every proposition of its",
        "query (verifier `check`), then judges up to `alpha` (3) candidates (verifier `verify`): 20 x",
        "propositions + 3 per query; the propositions planned here are the offline stand-in's (it finds few in",
        "CIRR's free-form instructions). AutoCIR's round counts are upper bounds: a query the corrector stops",
        "makes no re-planner call. WISER verifies the `top_n` (50) candidates of both paths in every round",
        "(up to 100 verifier calls per query and round; a candidate both paths hold is asked once) and makes",
        "one image edit per query in `round0` and one per refined image path after it: its `round1` counts are",
        "upper bounds (a path the verifier settles, or the refiner stops, is not refined).",
        "",
        "`octopus_webvid_release` imports the release's target descriptions, enriched descriptions and",
        "generated-image features (`run.imports`), so only the text encoder runs (name it:",
        "`encoder.text.name=open_clip encoder.text.model=ViT-L-14 encoder.text.pretrained=FILE`);",
        "the release has no verification outputs, so its verification is off.",
        "",
    ]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/agentcir-plans", help="placeholder galleries and cached plans")
    ap.add_argument("--queries", type=int, default=20, help="queries planned per row")
    ap.add_argument("--out", default=str(ROOT / "docs" / "reproduce.md"))
    ap.add_argument("--only-render", action="store_true", help="render the doc from the cached plans")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    plans = {}
    roots = None if a.only_render else placeholders(work)
    for bundle, *_ in ROWS:
        if bundle.endswith("_full"):  # the Table 1 row's plan
            src = bundle.replace("t3", "t1").removesuffix("_full")
            if src in plans:
                plans[bundle] = plans[src]
            continue
        f = work / "plans" / f"{bundle}.json"
        if not f.is_file() and roots is not None:
            f.parent.mkdir(exist_ok=True)
            print(f"planning {bundle}", flush=True)
            f.write_text(json.dumps(plan_row(bundle, roots, work, a.queries)))
        if f.is_file():
            plans[bundle] = json.loads(f.read_text())
    summaries = {b: summary(b, p, plans) for b, p in plans.items()}
    Path(a.out).write_text(render(summaries, a.queries))
    print(f"wrote {a.out} ({len(plans)} of {len(ROWS)} rows planned)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
