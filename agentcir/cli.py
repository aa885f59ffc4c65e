"""The ``agentcir`` command.

    agentcir run [OVERRIDES...]            run a recipe (e.g. method=xr encoder=catalog llm=rules dataset=demo)
    agentcir list [KIND]                   registered keys per component kind
    agentcir index FOLDER --out DIR        embed a folder of images into a gallery directory
    agentcir search --gallery DIR ...      reference image + text against an indexed gallery
    agentcir eval RUN_DIR... [--compare]   metrics of finished runs, side by side
    agentcir build-benchmark ...           composed benchmark from photos + an attributes CSV
    agentcir train-encoder data=DIR ...    train the catalog encoder's image tower (resumable)
    agentcir export-onnx encoder=KEY --out DIR   export an encoder's towers to ONNX

Overrides are Hydra's: ``group=option`` picks a recipe file, ``group.field=value`` sets a
field, ``+experiment=NAME`` applies an override bundle.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Callable, Sequence

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def _command(name: str):
    def deco(fn):
        COMMANDS[name] = fn
        return fn

    return deco


def _compose(args) -> dict:
    from .framework.recipe import compose

    return compose(args.overrides, config_name=args.config, extra_dirs=args.recipes or ())


def _add_recipe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", help="Hydra overrides: group=option, group.field=value, +experiment=NAME")
    p.add_argument("--config", default="config", help="top-level recipe file in the recipes folder (default: config)")
    p.add_argument("--recipes", action="append", metavar="DIR", help="extra recipe folder searched too (repeatable)")


# -- run ----------------------------------------------------------------------------------
@_command("run")
def cmd_run(args) -> int:
    from .framework.runner import run_recipe

    recipe = _compose(args)
    if args.print_recipe:
        import yaml

        print(yaml.safe_dump(recipe, sort_keys=False))
        return 0
    result = run_recipe(recipe, progress=False if args.quiet else None)
    show = recipe["run"]["show"]
    g = result.gallery
    for qi, q in enumerate(result.queries[:show]):
        print(f"\nquery {q.id}: reference {q.reference_id or (q.reference[0] if q.reference else '-')} + \"{q.text}\"")
        targets = set(q.targets)
        for r, (row, s) in enumerate(zip(result.candidates.ids[qi][:5], result.candidates.scores[qi][:5]), 1):
            if row < 0:
                break
            mark = "  <- target" if g.ids[row] in targets else ""
            print(f"  {r}. {g.ids[row]:<12} {s:8.4f}  {Path(g.paths[row]).name}{mark}")
    m = result.metrics["final"]
    line = "  ".join(f"{k}={v:.2f}" for k, v in m.items() if isinstance(v, (int, float)))
    print(f"\nmetrics ({len(result.queries)} queries, gallery {len(g)}): {line}")
    print(f"run directory: {result.dir}  (report.md, metrics.json, rankings.jsonl)")
    return 0


# -- list ---------------------------------------------------------------------------------
@_command("list")
def cmd_list(args) -> int:
    from .framework.recipe import RECIPES_DIR
    from .registry import REGISTRIES

    kinds = [args.kind] if args.kind else list(REGISTRIES)
    for kind in kinds:
        if kind not in REGISTRIES:
            from .framework.errors import InputError

            raise InputError(f"unknown kind '{kind}'; kinds: {', '.join(REGISTRIES)}")
        keys = REGISTRIES[kind].keys()
        recipes = sorted(p.stem for p in (RECIPES_DIR / kind).glob("*.yaml")) if (RECIPES_DIR / kind).is_dir() else []
        print(f"{kind}: {', '.join(keys) or '(none)'}")
        extra = [r for r in recipes if r not in keys]
        if extra and args.recipes_too:
            print(f"  recipe files: {', '.join(recipes)}")
    return 0


# -- index --------------------------------------------------------------------------------
@_command("index")
def cmd_index(args) -> int:
    from .framework.gallery import Gallery, items_from_folder
    from .framework.recipe import ComponentPool

    recipe = _compose(args)
    items, others = items_from_folder(args.folder)
    encoder = ComponentPool(recipe).get("encoder")
    g = Gallery.build(args.out, items, encoder, dtype=args.dtype, progress=not args.quiet, source=str(Path(args.folder).resolve()))
    print(f"indexed {len(g)} image(s) from '{args.folder}' into '{args.out}' with encoder '{recipe['encoder']['name']}' "
          f"(dim {g.dim}, {g.info['dtype']}); skipped {len(g.skipped)} unreadable image(s) and {len(others)} non-image file(s)")
    return 0


# -- search -------------------------------------------------------------------------------
@_command("search")
def cmd_search(args) -> int:
    import asyncio

    from .components.memory.call_cache import open_call_cache
    from .framework.errors import InputError
    from .framework.gallery import Gallery
    from .framework.method import RunState
    from .framework.recipe import ComponentPool
    from .framework.runner import RunContext, Runner, caption_stage
    from .framework.types import Query

    recipe = _compose(args)
    if not args.image and not args.text:
        raise InputError("search needs --image, --text or both")
    if args.image and not Path(args.image).is_file():
        raise InputError(f"reference image '{args.image}' not found")
    pool = ComponentPool(recipe)
    gallery = Gallery.open(args.gallery, encoder=pool.get("encoder"))
    method = pool.get("method")
    q = Query(id="query", text=args.text or "", reference=[str(Path(args.image).resolve())] if args.image else [])
    state = RunState(queries=[q], gallery=gallery)
    ctx = RunContext(cache=open_call_cache(pool, recipe["run"]), run_dir=None, concurrency=recipe["run"]["concurrency"],
                     progress=not args.quiet, kernels=recipe["kernels"]["backend"])
    prepare = [caption_stage(pool, recipe["run"]["gallery_captions"])] if method.needs_captions else []
    asyncio.run(Runner(method, ctx, state, prepare=prepare).execute())
    c = state.candidates
    print(f"{'rank':>4}  {'id':<24} {'score':>9}  path")
    for r, (row, s) in enumerate(zip(c.ids[0][: args.k], c.scores[0][: args.k]), 1):
        if row >= 0:
            print(f"{r:>4}  {gallery.ids[row]:<24} {s:9.4f}  {gallery.paths[row]}")
    return 0


# -- eval ---------------------------------------------------------------------------------
@_command("eval")
def cmd_eval(args) -> int:
    from .framework.errors import InputError
    from .framework.report import metrics_table

    rows = {}
    for d in args.runs:
        f = Path(d) / "metrics.json"
        if not f.is_file():
            raise InputError(f"'{d}' is not a finished run directory (no metrics.json)")
        m = json.loads(f.read_text())
        rows[Path(d).name] = m["final"]
        if not args.compare:
            print(f"## {Path(d).name}\n{m.get('subset', '')}\n")
            print(metrics_table({"final": m["final"], **{f"after {k}": v for k, v in m.get("stages", {}).items()}}))
    if args.compare:
        print(metrics_table(rows))
    return 0


# -- build-benchmark ----------------------------------------------------------------------
@_command("build-benchmark")
def cmd_build_benchmark(args) -> int:
    from .framework.datasets.builder import BenchmarkSpec, build_benchmark

    spec = BenchmarkSpec(csv_path=args.csv, images_dir=args.images, out=args.out, num_queries=args.queries,
                         seed=args.seed, split=args.split, gallery_size=args.gallery_size, copy_images=args.copy_images,
                         image_pattern=args.image_pattern, id_column=args.id_column)
    summary = build_benchmark(spec)
    print(json.dumps(summary))
    return 0


# -- train-encoder ------------------------------------------------------------------------
@_command("train-encoder")
def cmd_train_encoder(args) -> int:
    from .components.encoders.catalog_train import compose_train_config, train

    cfg = compose_train_config(args.overrides, config_name=args.config, extra_dirs=args.recipes or ())
    if args.quiet:
        cfg.progress = False
    m = train(cfg)
    v = m["val"]
    figures = "  ".join(f"{k}={v[k]:.3f}" for k in ("type_top1", "colour_top1", "R@1", "R@5", "R@10") if k in v)
    print(f"trained {m['epochs']} epoch(s) on {m['train_images']} photos in {m['train_s']:.0f} s "
          f"({m['images_per_s']:.0f} images/s); val ({m['val_images']} photos): {figures or 'no val ids'}")
    print(f"checkpoint: {Path(cfg.out) / 'catalog.pt'}  (use it: encoder=catalog encoder.checkpoint={Path(cfg.out) / 'catalog.pt'})")
    return 0


# -- export-onnx --------------------------------------------------------------------------
@_command("export-onnx")
def cmd_export_onnx(args) -> int:
    from .components.encoders.onnx import export_onnx
    from .framework.recipe import ComponentPool

    recipe = _compose(args)
    encoder = ComponentPool(recipe).get("encoder")
    out = export_onnx(encoder, args.out, opset=args.opset)
    print(f"exported encoder '{recipe['encoder']['name']}' to '{out}' (image.onnx, text.onnx, tokenizer.json, encoder.json); "
          f"serve it with: encoder=onnx encoder.path={out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="agentcir", description="Training-free agentic image retrieval.")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run a recipe on a dataset and write a run directory",
                       description="Run a recipe: agentcir run method=xr encoder=catalog llm=rules dataset=demo. "
                                   "Re-running the same recipe resumes its run directory.")
    _add_recipe_args(p)
    p.add_argument("--print-recipe", action="store_true", help="print the resolved recipe and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")

    p = sub.add_parser("list", help="registered keys per component kind")
    p.add_argument("kind", nargs="?", help="one kind (encoder, llm, captioner, generator, detector, verifier, memory, method, dataset)")
    p.add_argument("--recipes-too", action="store_true", help="also list recipe files of each group")

    p = sub.add_parser("index", help="embed a folder of images into a gallery directory",
                       description="Embed every image under FOLDER (recursively) with the recipe's encoder into --out. "
                                   "Unreadable and non-image files are skipped and counted.")
    p.add_argument("folder")
    p.add_argument("--out", required=True, help="gallery directory to write")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16"], help="embedding storage")
    p.add_argument("-q", "--quiet", action="store_true")
    _add_recipe_args(p)

    p = sub.add_parser("search", help="search an indexed gallery with a reference image and/or a text",
                       description="Rank an indexed gallery for one query with the recipe's method.")
    p.add_argument("--gallery", required=True, help="gallery directory made by `agentcir index`")
    p.add_argument("--image", help="reference image")
    p.add_argument("--text", help="modification text (or a plain text query)")
    p.add_argument("-k", type=int, default=10, help="results to print")
    p.add_argument("-q", "--quiet", action="store_true")
    _add_recipe_args(p)

    p = sub.add_parser("eval", help="metrics of finished runs", description="Print the metrics of run directories.")
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--compare", action="store_true", help="one table, a row per run")

    p = sub.add_parser("build-benchmark", help="build a composed benchmark from photos + attributes CSV",
                       description="Build (reference, edit text, all correct targets) queries from attribute edits.")
    p.add_argument("--csv", required=True, help="attributes CSV (columns id, baseColour, articleType, gender, usage)")
    p.add_argument("--images", required=True, help="folder of the photos")
    p.add_argument("--out", required=True, help="benchmark folder to write")
    p.add_argument("--queries", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", default="val", choices=["val", "train", "all"],
                   help="which part of the id hash split forms the gallery (val = unseen by the catalog encoder)")
    p.add_argument("--gallery-size", type=int, default=0, help="cap the gallery (0 = the whole split)")
    p.add_argument("--image-pattern", default="{id}.jpg", help="photo file name from CSV columns")
    p.add_argument("--id-column", default="id")
    p.add_argument("--copy-images", action="store_true", help="copy photos into the benchmark folder")

    p = sub.add_parser("train-encoder", help="train the catalog encoder's image tower (LiT, locked MiniLM text tower)",
                       description="Train the catalog encoder's image tower on a folder of photos + an attributes CSV: "
                                   "agentcir train-encoder data=DIR epochs=30 out=runs/my-encoder. Arguments are key=value "
                                   "overrides of recipes/train/catalog.yaml. Rerunning the same command resumes from out/last.pt.")
    p.add_argument("overrides", nargs="*", help="key=value overrides of the train recipe (data=DIR epochs=N out=DIR ...)")
    p.add_argument("--config", default="train/catalog", help="train recipe in the recipes folder (default: train/catalog)")
    p.add_argument("--recipes", action="append", metavar="DIR", help="extra recipe folder searched too (repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("export-onnx", help="export an encoder's image and text towers to ONNX",
                       description="Export the recipe's encoder (e.g. encoder=catalog) to DIR; serve it with encoder=onnx "
                                   "encoder.path=DIR (onnxruntime, no torch needed).")
    p.add_argument("--out", required=True, help="folder to write image.onnx, text.onnx, tokenizer.json, encoder.json")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset")
    _add_recipe_args(p)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    from .framework.errors import AgentcirError
    from .registry import ConfigError, RegistryError

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("agentcir").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    try:
        return COMMANDS[args.command](args)
    except (AgentcirError, ConfigError, RegistryError) as e:
        if args.verbose:
            raise
        print(f"agentcir {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
