"""The ``agentcir`` command.

    agentcir run [OVERRIDES...]            run a recipe (e.g. method=xr encoder=catalog llm=rules dataset=demo)
    agentcir run -m OVERRIDES...           a sweep (method.lam=0.1,0.2 method=xr,octopus +experiment=a,b range(...))
    agentcir list [KIND]                   registered keys per component kind
    agentcir index FOLDER --out DIR        embed a folder of images into a gallery directory
    agentcir search --gallery DIR ...      reference image and/or text against an indexed gallery (--json)
    agentcir serve --gallery DIR           a web app + JSON API: search, refine, history questions (agentcir[serve])
    agentcir mcp --gallery DIR             an MCP server (stdio or streamable HTTP): the same searches as tools for agents
    agentcir eval RUN_DIR... [--compare]   metrics of finished runs, side by side (+ PNG plot, submissions)
    agentcir build-benchmark ...           composed benchmark from photos + an attributes CSV
    agentcir build-disbench ...            DISBench-format photo-history benchmark (multi-hop questions)
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

    # a recipe only printed or planned here may name devices this machine lacks (a GPU run's plan)
    runs_here = not (getattr(args, "plan", False) or getattr(args, "print_recipe", False) or getattr(args, "cfg", None))
    return compose(args.overrides, config_name=args.config, extra_dirs=args.recipes or (), check_devices=runs_here)


def _add_recipe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", help="Hydra overrides: group=option, group.field=value, +experiment=NAME")
    p.add_argument("--config", default="config", help="top-level recipe file in the recipes folder (default: config)")
    p.add_argument("--recipes", action="append", metavar="DIR", help="extra recipe folder searched too (repeatable)")


# -- run ----------------------------------------------------------------------------------
@_command("run")
def cmd_run(args) -> int:
    from .framework.runner import run_recipe

    if args.multirun:
        return _run_multirun(args)
    if args.cfg == "sweep":
        from .framework.errors import InputError

        raise InputError("--cfg sweep prints the jobs of a sweep: add -m (--multirun)")
    recipe = _compose(args)
    if args.print_recipe or args.cfg:
        import yaml

        print(yaml.safe_dump(recipe, sort_keys=False))
        return 0
    if args.plan:
        from .framework.plan import plan_recipe

        print(plan_recipe(recipe).render(), end="")
        return 0
    result = run_recipe(recipe, progress=False if args.quiet else None, wait=args.wait)
    show = recipe["run"]["show"]
    g = result.gallery
    for qi, q in enumerate(result.queries[:show]):
        print(f'\nquery {q.id}: reference {q.reference_id or (q.reference[0] if q.reference else "-")} + "{q.text}"')
        targets = set(q.targets)
        for r, (row, s) in enumerate(zip(result.candidates.ids[qi][:5], result.candidates.scores[qi][:5]), 1):
            if row < 0:
                break
            mark = "  <- target" if g.ids[row] in targets else ""
            print(f"  {r}. {g.ids[row]:<12} {s:8.4f}  {Path(g.paths[row]).name}{mark}")
    m = result.metrics["final"]
    line = "  ".join(f"{k}={v:.2f}" for k, v in m.items() if isinstance(v, (int, float)))
    print(f"\nmetrics ({len(result.queries)} queries, gallery {len(g)}): {line}")
    for st, v in result.metrics.get("imports", {}).items():
        print(f"imported: stage {st} for {v['queries']} queries ({', '.join(v['fields'])})")
    print(f"run directory: {result.dir}  (report.md, metrics.json, rankings.jsonl)")
    return 0


def _run_multirun(args) -> int:
    from .framework.sweep import compose_jobs, default_name, plan, run_sweep

    if args.print_recipe or args.cfg:
        import yaml

        jobs, recipes = compose_jobs(args.overrides, config_name=args.config, extra_dirs=args.recipes or ())
        name = args.sweep_name or default_name(args.overrides, args.config, args.recipes or ())
        for job, recipe, rec in zip(jobs, recipes, plan(jobs, recipes, name)):
            print(f"# job {job.index}: {job.label}  (run directory {rec['dir']})")
            if args.cfg == "sweep":
                print(f"#   overrides: {' '.join(job.overrides) or '-'}")
            else:
                print(yaml.safe_dump(recipe, sort_keys=False), end="---\n" if job.index < len(jobs) - 1 else "")
        return 0

    def told(rec: dict, earlier: bool) -> None:
        m = rec.get("metrics") or {}
        figures = "  ".join(f"{k}={v:.2f}" for k, v in list(m.items())[:4] if isinstance(v, (int, float)))
        state = "finished earlier" if earlier else rec["status"]
        print(f"job {rec['index']} [{state}] {rec['label']}: {figures or rec.get('error', '')}", flush=True)

    result = run_sweep(
        args.overrides,
        config_name=args.config,
        extra_dirs=args.recipes or (),
        name=args.sweep_name,
        progress=False if args.quiet else None,
        on_job=told,
    )
    print(f"\n{(result.dir / 'summary.md').read_text()}")
    print(
        f"sweep directory: {result.dir}  (manifest.json, summary.md/.csv/.json"
        + "".join(f", {p.name}" for p in result.plots)
        + ")"
    )
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
    from .framework.indexing import index_folder

    recipe = _compose(args)
    encoder = None
    if args.watch:  # built once, kept for the updates
        from .framework.recipe import ComponentPool

        encoder = (
            ComponentPool(recipe).get("encoder")
            if recipe.get("encoder", {}).get("name") not in (None, "none")
            else None
        )
    # photo metadata (EXIF/XMP, gazetteer places, folder = album) goes into each item's meta
    r = index_folder(
        recipe,
        args.folder,
        args.out,
        dtype=args.dtype,
        user=args.user,
        metadata=not args.no_metadata,
        scale=_scale_args(recipe, args),
        progress=not args.quiet,
        follow_links=args.follow_links,
        encoder=encoder,
    )
    if r.shards:
        print(f"{r.shards} shard(s), engine {r.engine}")
    if r.change:
        print(r.change)
    print(
        f"indexed {r.indexed} image(s) from '{args.folder}' into '{args.out}' with encoder '{r.encoder}' "
        f"(dim {r.gallery.dim}, {r.gallery.info['dtype']}); skipped {len(r.skipped)} unreadable image(s) and "
        f"{len(r.non_images)} non-image file(s)"
        + (f" and {len(r.links)} folder(s) not walked ({r.links[0].path}: {r.links[0].reason})" if r.links else "")
    )
    print(
        f"embedding took {r.seconds:.2f} s"
        + (
            f" ({r.images / r.seconds:.1f} images/s)"
            if r.fresh
            else " (the folder held an earlier build: only what it lacked was embedded)"
        )
    )
    if r.metadata:
        print(r.metadata)
    if r.domain:
        print(r.domain)
    if args.watch:
        return _watch_index(args, recipe, encoder)
    return 0


def _watch_index(args, recipe: dict, encoder) -> int:
    """``agentcir index --watch``: follow the folder, updating the gallery per settled batch, until Ctrl-C."""
    from .framework.indexing import FolderFollower, watch_line
    from .framework.watch import FolderWatch

    follower = FolderFollower(
        recipe,
        args.folder,
        args.out,
        encoder=encoder,
        scale=_scale_args(recipe, args),
        dtype=args.dtype,
        user=args.user,
        metadata=not args.no_metadata,
        follow_links=args.follow_links,
    )
    watch = FolderWatch(
        args.folder, debounce_s=args.debounce, observer="polling" if args.poll else "auto", poll_s=args.poll or 1.0
    )
    _ctrl_c_stops()
    try:
        with watch:
            print(
                f"watching '{args.folder}' ({watch.kind} file events; a burst of changes is applied "
                f"{watch.debounce_s:g} s after its last one); Ctrl-C stops",
                flush=True,
            )
            follower.update()  # what changed while the first index ran
            follower.follow(watch, on_update=lambda b, r, s: print(watch_line(b, r, s), flush=True))
    except KeyboardInterrupt:
        pass
    print(
        f"stopped watching '{args.folder}' after {follower.updates - 1} update(s); the gallery '{args.out}' is whole",
        flush=True,
    )
    return 0


def _ctrl_c_stops() -> None:
    """Make SIGINT raise KeyboardInterrupt in the main thread, as a watch's "Ctrl-C stops" says, even when
    the launcher ignored or blocked it (a job runner, a test worker): both are inherited, and the watch
    would then never stop. Called before the watch's threads start, so they inherit the unblocked mask."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _scale_args(recipe: dict, args) -> dict | None:
    """The recipe's ``scale`` section with ``--engine/--address/--shards`` applied, validated and
    with every default filled; None: unsharded."""
    from .framework.indexing import scale_for

    return scale_for(
        recipe,
        engine=getattr(args, "engine", None),
        address=getattr(args, "address", None),
        shards=getattr(args, "shards", None),
    )


@_command("build-index")
def cmd_build_index(args) -> int:
    from .framework.errors import InputError
    from .framework.galleries import open_gallery
    from .framework.scale import scale_settings
    from .framework.scale.ann import build_indexes

    recipe = _compose(args)
    scale = dict(recipe.get("scale") or {}, search=args.kind)
    for flag in ("nlist", "sq", "pq_m", "hnsw_m"):
        if getattr(args, flag) is not None:
            scale[flag] = getattr(args, flag)
    scale = scale_settings(scale)
    g = open_gallery(args.gallery, scale=scale)
    if not hasattr(g, "shards"):
        raise InputError(
            f"'{args.gallery}' is not a sharded gallery; build one with `agentcir index FOLDER --out G --shards S`"
        )
    infos = build_indexes(g, scale, progress=not args.quiet)
    print(
        f"built {args.kind} indexes of {len(infos)} shard(s) of '{args.gallery}' "
        f"({sum(not i.get('reused') for i in infos)} new); search them with scale.search={args.kind}"
    )
    return 0


# -- search -------------------------------------------------------------------------------
@_command("search")
def cmd_search(args) -> int:
    from .framework.loops import format_loop, loop_steps
    from .framework.search import Searcher

    searcher = Searcher(_compose(args), args.gallery, progress=not (args.quiet or args.json))
    result = searcher.search(image=args.image, text=args.text or "", k=args.k)
    if args.json:  # the web API's shape: {"hits": [...], "trace": {...}}
        print(json.dumps(result.to_json(), ensure_ascii=False, default=str))
        return 0
    note = result.trace["search"]["note"]
    if note:
        print(f"({note})", file=sys.stderr)
    print(f"{'rank':>4}  {'id':<24} {'score':>9}  path")
    for h in result.hits:
        score = "-" if h.score is None else f"{h.score:9.4f}"
        print(f"{h.rank:>4}  {h.id:<24} {score:>9}{' *' if h.verified else '  '}  {h.path}")
    if any(h.verified for h in result.hits):
        print("(* verified: the verification stage accepted it)", file=sys.stderr)
    loop = format_loop(loop_steps(result.trace), result.trace["search"]["method"])
    if loop:  # a looped method's rounds, suggestions and verdicts
        print(loop, file=sys.stderr)
    if result.trace["search"].get("no_match"):
        print(result.trace["search"]["no_match"])
    return 0


# -- serve --------------------------------------------------------------------------------
@_command("serve")
def cmd_serve(args) -> int:
    import ipaddress
    import os

    from .framework.errors import InputError, require
    from .framework.search import Searcher
    from .serve import ServeConfig, create_app
    from .serve.app import TOKEN_ENV

    uvicorn = require("uvicorn", "serve", feature="agentcir serve")
    token = args.token or os.environ.get(TOKEN_ENV, "")
    try:
        local = args.host == "localhost" or ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        local = False
    if not local and not token:
        print(
            f"agentcir serve: warning: listening on {args.host} without a token: anyone who can reach this address can "
            f"search the gallery and read its files; set --token or {TOKEN_ENV}",
            file=sys.stderr,
        )
    if args.max_upload_mb <= 0 or args.max_pixels <= 0:
        raise InputError("--max-upload-mb and --max-pixels must be positive")
    recipe = _compose(args)
    searcher = Searcher(recipe, args.gallery)
    ask = None
    if not args.no_questions and not getattr(searcher.method, "answers_set", False):

        def ask():  # the history-question agent over the same gallery, built on the first question
            from .framework.recipe import compose

            keep = [
                o for o in args.overrides if not o.lstrip("+~").startswith("method")
            ]  # the search method's settings
            return Searcher(
                compose([*keep, "method=imageseeker"], config_name=args.config, extra_dirs=args.recipes or ()),
                args.gallery,
            )

    cfg = ServeConfig(
        token=token,
        host=args.host,
        allow_hosts=tuple(args.allow_host or ()),
        max_upload_mb=args.max_upload_mb,
        max_pixels=args.max_pixels,
        uploads_mb=args.uploads_mb,
        thumbs_mb=args.thumbs_mb,
    )
    cfg.dup_threshold, cfg.export_max_mb, cfg.album_root = args.dup_threshold, args.export_max_mb, args.album_root or ""
    app = create_app(searcher, uploads=args.uploads, thumbs=args.thumbs, config=cfg, ask=ask)
    if args.watch is not None:  # --watch [FOLDER]: default, the folder the gallery was indexed from
        folder = args.watch or str(searcher.gallery.info.get("source") or "")
        if args.watch and not os.path.isdir(folder):
            raise InputError(f"--watch: folder '{folder}' does not exist or is not a folder")
        if not folder or not os.path.isdir(folder):
            raise InputError(
                f"--watch: the gallery '{args.gallery}' names no photo folder that exists "
                f"('{folder}'); give it: --watch FOLDER"
            )
        app.state.serve.watch(
            folder, debounce_s=args.debounce, observer="polling" if args.poll else "auto", poll_s=args.poll or 1.0
        )
        print(f"watching '{folder}': new, changed and deleted photos are indexed and searchable without a restart")
    print(
        f"serving gallery '{args.gallery}' on http://{args.host}:{args.port}/{'?token=...' if token else ''}  "
        f"(API docs at /docs; warm-up and updates at /api/status; Ctrl-C stops)"
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


# -- mcp ----------------------------------------------------------------------------------
def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@_command("mcp")
def cmd_mcp(args) -> int:
    import os

    from .framework.errors import require
    from .framework.search import Searcher

    require("mcp", "mcp", feature="agentcir mcp")
    from .mcp_server import MCPConfig, PhotoTools, run
    from .serve.app import TOKEN_ENV

    token = args.token or os.environ.get(TOKEN_ENV, "")
    if args.transport != "stdio" and not _loopback(args.host) and not token:
        print(
            f"agentcir mcp: warning: listening on {args.host} without a token: anyone who can reach this address can "
            f"search the gallery and read its photos; set --token or {TOKEN_ENV}",
            file=sys.stderr,
        )
    cfg = MCPConfig(
        token=token,
        host=args.host,
        allow_hosts=tuple(args.allow_host or ()),
        roots=tuple(args.root or ()),
        max_upload_mb=args.max_upload_mb,
        max_pixels=args.max_pixels,
        max_k=args.max_k,
        updates=not args.no_updates,
    )
    recipe = _compose(args)
    searcher = Searcher(recipe, args.gallery)
    ask = None
    if not args.no_questions and not getattr(searcher.method, "answers_set", False):

        def ask():  # the history-question agent over the same gallery, built on the first question
            from .framework.recipe import compose

            keep = [o for o in args.overrides if not o.lstrip("+~").startswith("method")]
            return Searcher(
                compose([*keep, "method=imageseeker"], config_name=args.config, extra_dirs=args.recipes or ()),
                args.gallery,
            )

    tools = PhotoTools(searcher, config=cfg, uploads=args.uploads, thumbs=args.thumbs, ask=ask)
    if args.transport != "stdio":
        print(
            f"MCP server of gallery '{args.gallery}' at http://{args.host}:{args.port}/mcp (streamable HTTP"
            f"{', bearer token required' if token else ''}; Ctrl-C stops)",
            file=sys.stderr,
        )
    run(tools, transport=args.transport, port=args.port)
    return 0


# -- eval ---------------------------------------------------------------------------------
@_command("eval")
def cmd_eval(args) -> int:
    from .framework.report import fashioniq_groups, load_run, metrics_table, run_labels

    runs = [load_run(d) for d in args.runs]
    if args.submit:
        return _eval_submit(runs, args.submit)
    if args.best_of:
        return _eval_best_of(runs)
    if args.compare:
        return _eval_compare(runs, args)
    for label, r in zip(run_labels(runs), runs):
        m = r.metrics
        print(f"## {label}\n{m.get('subset', '')}\n")
        print(metrics_table({"final": m.get("final", {}), **{f"after {k}": v for k, v in m.get("stages", {}).items()}}))
    groups = fashioniq_groups(runs)
    if groups:
        print("## FashionIQ (plain mean over dress, shirt, toptee)\n")
        print(metrics_table({name: g["metrics"] for name, g in groups.items()}))
    if not any(r.metrics.get("final") for r in runs):
        print("(no metrics: test splits have no ground truth; write the server files with --submit DIR)")
    return 0


def _eval_compare(runs, args) -> int:
    from .framework.accounting import time_rows
    from .framework.compare import comparison_tables, export_paths, plot_rows, to_markdown, write_csv, write_latex
    from .framework.report import metrics_table, override_labels, plot_comparison, run_labels

    tables = comparison_tables(runs)
    subsets = {r.metrics.get("subset", "") for r in runs}
    for label, r in zip(override_labels(runs), runs):
        print(
            f"- {label}: {r.dir}"
            + (f" ({r.metrics['subset']})" if len(subsets) > 1 and r.metrics.get("subset") else "")
        )
    if len(subsets) == 1 and next(iter(subsets)):
        print(f"\n{next(iter(subsets))}")
    print()
    for t in tables:
        print(to_markdown(t))
    print("Time (s) and model calls (from each run's metrics.json):\n")
    print(metrics_table(time_rows(runs, run_labels(runs))))
    if args.csv:
        for f in write_csv(tables, args.csv):
            print(f"csv: {f}")
    if args.latex:
        print(f"latex: {write_latex(tables, args.latex)}")
    if args.plot != "none":
        base = Path(args.plot) if args.plot else Path(args.runs[0]).resolve().parent / "compare.png"
        for t, out in zip(tables, export_paths(base, tables)):  # one chart per benchmark
            rows = {k: v for k, v in plot_rows(t).items() if v}
            if rows:
                print(f"plot: {plot_comparison(rows, out, title=t.title)}")
    return 0


def _run_dataset(run):
    from .framework.errors import InputError
    from .framework.recipe import ComponentPool, validate

    if not run.recipe.get("dataset"):
        raise InputError(f"run '{run.dir}' has no recipe.yaml with a dataset")
    recipe = validate({"dataset": run.recipe["dataset"]})  # only the dataset: other keys may be plugins absent here
    return ComponentPool(recipe).get("dataset")


def _eval_submit(runs, out_dir: str) -> int:
    from .framework.report import read_rankings

    for run in runs:
        files = _run_dataset(run).write_submission(read_rankings(run.dir), out_dir)
        for f in files:
            print(f"{run.name}: wrote {f}")
    return 0


def _eval_best_of(runs) -> int:
    from .framework.errors import InputError
    from .framework.report import metrics_table, read_rankings

    ds = [r.recipe.get("dataset") for r in runs]
    if any(d != ds[0] for d in ds):
        raise InputError("--best-of needs runs of one dataset recipe (the same dataset and settings)")
    dataset = _run_dataset(runs[0])
    if not hasattr(dataset, "best_of"):
        raise InputError(f"dataset '{ds[0].get('name')}' has no Best@k metric (DISBench-format datasets do)")
    best = dataset.best_of([read_rankings(r.dir) for r in runs])
    print(metrics_table({f"best of {len(runs)} runs": best}))
    return 0


# -- build-benchmark ----------------------------------------------------------------------
@_command("build-benchmark")
def cmd_build_benchmark(args) -> int:
    from .framework.datasets.builder import DEFAULT_EDITS, BenchmarkSpec, build_benchmark, parse_edit

    edits = dict(parse_edit(e) for e in args.edit) if args.edit else dict(DEFAULT_EDITS)
    spec = BenchmarkSpec(
        csv_path=args.csv,
        images_dir=args.images,
        out=args.out,
        num_queries=args.queries,
        seed=args.seed,
        split=args.split,
        gallery_size=args.gallery_size,
        copy_images=args.copy_images,
        image_pattern=args.image_pattern,
        id_column=args.id_column,
        edits=edits,
        max_targets=args.max_targets,
        article_column=args.article_column or "",
        attribution=args.attribution or "",
    )
    summary = build_benchmark(spec)
    print(json.dumps(summary))
    print(
        f"benchmark written to '{args.out}'; run it with: agentcir run dataset=composed dataset.root={args.out}",
        file=sys.stderr,
    )
    return 0


# -- build-disbench -----------------------------------------------------------------------
@_command("build-disbench")
def cmd_build_disbench(args) -> int:
    from .framework.datasets.history_builder import HistorySpec, build_history_benchmark

    spec = HistorySpec(
        out=args.out,
        csv_path=args.csv or "",
        images_dir=args.images or "",
        folder=args.folder or "",
        user_column=args.user_column,
        label_column=args.label_column,
        id_column=args.id_column,
        image_pattern=args.image_pattern,
        min_photos=args.min_photos,
        photos_per_event=args.photos_per_event,
        queries_per_user=args.queries_per_user,
        seed=args.seed,
        link="copy" if args.copy_images else "symlink",
        attribution=args.attribution or "",
    )
    if args.exclude_label is not None:
        spec.exclude_labels = list(args.exclude_label)
    print(json.dumps(build_history_benchmark(spec)))
    print(
        f"benchmark written to '{args.out}'; run it with: agentcir run method=imageseeker dataset=disbench "
        f"dataset.root={args.out}",
        file=sys.stderr,
    )
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
    towers = f"{m['members']} towers x " if m.get("members", 1) > 1 else ""
    print(
        f"trained {towers}{m['epochs']} epoch(s) on {m['train_images']} photos in {m['train_s']:.0f} s "
        f"({m['images_per_s']:.0f} images/s); val ({m['val_images']} photos): {figures or 'no val ids'}"
    )
    print(
        f"checkpoint: {Path(cfg.out) / 'catalog.pt'}  (use it: encoder=catalog encoder.checkpoint={Path(cfg.out) / 'catalog.pt'})"
    )
    return 0


# -- export-onnx --------------------------------------------------------------------------
@_command("export-onnx")
def cmd_export_onnx(args) -> int:
    from .components.encoders.onnx import export_onnx
    from .framework.recipe import ComponentPool

    recipe = _compose(args)
    encoder = ComponentPool(recipe).get("encoder")
    out = export_onnx(encoder, args.out, opset=args.opset)
    print(
        f"exported encoder '{recipe['encoder']['name']}' to '{out}' (image.onnx, text.onnx, tokenizer.json, encoder.json); "
        f"serve it with: encoder=onnx encoder.path={out}"
    )
    return 0


def _add_watch_args(p: argparse.ArgumentParser, what: str, folder: bool = False) -> None:
    if folder:
        p.add_argument("--watch", nargs="?", const="", metavar="FOLDER", help=what)
    else:
        p.add_argument("--watch", action="store_true", help=what)
    p.add_argument(
        "--debounce",
        type=float,
        default=1.0,
        metavar="S",
        help="watch: apply a burst of changes once none came for S seconds (default 1)",
    )
    p.add_argument(
        "--poll",
        type=float,
        default=0.0,
        metavar="S",
        help="watch: poll the folder every S seconds instead of the platform's file events "
        "(network shares); default: file events, polling where they are unavailable",
    )


@_command("kernels")
def cmd_kernels(args) -> int:
    from .kernels import tune

    if args.reset:
        print(f"removed the kernel tune cache {tune.reset()}; choices are measured again on first use")
    if args.run:
        from .kernels import numba as _numba  # noqa: F401  (registers the measurement)

        kinds = args.dtype or ["float32", "float16", "bfloat16", "int8"]
        for kind in sorted(kinds, key=lambda k: k != tune.BASE_KIND):  # float32 first: the others follow it
            for _, label in tune.CLASSES:
                if not tune.follows_base(kind, tune.class_rows(label)):
                    tune.tune(kind, tune.class_rows(label))
    if args.show or not (args.reset or args.run):
        print(tune.show())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .framework import gallery_files as gf  # the servers' default limits (no heavy import)

    ap = argparse.ArgumentParser(prog="agentcir", description="Training-free agentic image retrieval.")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "run",
        help="run a recipe on a dataset and write a run directory",
        description="Run a recipe: agentcir run method=xr encoder=catalog llm=rules dataset=demo. "
        "Re-running the same recipe resumes its run directory.",
    )
    _add_recipe_args(p)
    p.add_argument("--print-recipe", action="store_true", help="print the resolved recipe and exit")
    p.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        help="sweep: run every combination of the swept overrides (key=a,b,c, key=range(start,stop,step), "
        "group=a,b, +experiment=a,b) in one process, into runs/sweeps/NAME/ (rerun to resume)",
    )
    p.add_argument(
        "--cfg",
        choices=["job", "sweep"],
        help="print and exit: job = the resolved recipe (of every job with -m), sweep = the jobs of -m "
        "(swept values, overrides, run directories)",
    )
    p.add_argument(
        "--sweep-name", metavar="NAME", help="sweep directory name under run.root/sweeps (default: swept keys + hash)"
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="print the model calls, tokens and cost the run would make "
        "(per stage and component; prices from run.prices) without calling any model, and exit",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--wait",
        action="store_true",
        help="if another process is running in the same run directory, wait for it instead of failing",
    )

    p = sub.add_parser("list", help="registered keys per component kind")
    p.add_argument(
        "kind",
        nargs="?",
        help="one kind (encoder, llm, captioner, generator, editor, detector, verifier, memory, method, dataset)",
    )
    p.add_argument("--recipes-too", action="store_true", help="also list recipe files of each group")

    p = sub.add_parser(
        "index",
        help="embed a folder of images into a gallery directory",
        description="Embed every image under FOLDER (recursively) with the recipe's encoder into --out. "
        "Unreadable and non-image files are skipped and counted.",
    )
    p.add_argument("folder")
    p.add_argument(
        "--out",
        required=True,
        help="gallery directory to write, or to update: only new and changed files are embedded (docs/library.md)",
    )
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "float16", "int8"],
        help="embedding storage (int8: float32 rows plus int8 codes; searches scan the codes, re-ranked exactly)",
    )
    p.add_argument("--user", help="user id stored in every item's metadata (photo histories of several users)")
    p.add_argument(
        "--no-metadata",
        action="store_true",
        help="skip photo metadata (EXIF/XMP date, GPS and place, camera, album = folder, people, keywords)",
    )
    p.add_argument(
        "--follow-links",
        action="store_true",
        help="follow symlinked folders (each real folder once; loops refused); without it they are skipped and counted",
    )
    p.add_argument(
        "--engine", choices=["local", "ray"], help="embed in this process or as a Ray Data job (docs/scale.md)"
    )
    p.add_argument("--address", help="Ray cluster to join (default $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--shards", type=int, help="write a sharded gallery of this many shards")
    _add_watch_args(
        p,
        "after indexing, follow the folder and update the gallery as photos are added, changed, "
        "renamed or deleted (docs/library.md), until Ctrl-C",
    )
    p.add_argument("-q", "--quiet", action="store_true")
    _add_recipe_args(p)

    p = sub.add_parser(
        "build-index",
        help="build per-shard approximate indexes (faiss) of a sharded gallery",
        description="Train and fill a faiss index per shard (resumable); search with scale.search=KIND.",
    )
    p.add_argument("gallery", help="sharded gallery directory")
    from .framework.scale import SEARCHES, SQ

    p.add_argument("--kind", required=True, choices=[s for s in SEARCHES if s != "exact"])
    p.add_argument("--nlist", type=int, help="IVF lists per shard (default about 4*sqrt(rows))")
    p.add_argument("--sq", choices=SQ, help="IVF-SQ codes (default fp16: a half gallery's values exactly)")
    p.add_argument("--pq-m", dest="pq_m", type=int, help="IVF-PQ sub-quantizers (divides the dim)")
    p.add_argument("--hnsw-m", dest="hnsw_m", type=int, help="HNSW neighbours per node")
    p.add_argument("-q", "--quiet", action="store_true")
    _add_recipe_args(p)

    p = sub.add_parser(
        "search",
        help="search an indexed gallery with a reference image and/or a text",
        description="Rank an indexed gallery for one query with the recipe's method.",
    )
    p.add_argument("--gallery", required=True, help="gallery directory made by `agentcir index`")
    p.add_argument("--image", help="reference image")
    p.add_argument("--text", help="modification text (or a plain text query)")
    p.add_argument("-k", type=int, default=10, help="results to print")
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object: {"hits": [{rank, id, score, path, row, meta, verified}], "trace": {...}} '
        "(the web API's shape; a set-answering method's hits are its answer set, score null)",
    )
    p.add_argument("-q", "--quiet", action="store_true")
    _add_recipe_args(p)

    p = sub.add_parser(
        "serve",
        help="a search web page (and JSON API) over an indexed gallery",
        description="Serve a web page where you upload a reference image and/or type a text, ranked by the "
        "recipe's method over an indexed gallery, and ask history questions (ImageSeeker); "
        "JSON API at /api/search and /api/ask, docs at /docs. Binds 127.0.0.1 unless --host "
        "says otherwise. Needs agentcir[serve].",
    )
    p.add_argument("--gallery", required=True, help="gallery directory made by `agentcir index`")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--uploads", help="folder for uploaded reference images (default <run.root>/_uploads)")
    p.add_argument("--thumbs", help="thumbnail cache folder (default <run.root>/_thumbs)")
    p.add_argument("--token", help="bearer token required on every route (default: $AGENTCIR_TOKEN; none = no auth)")
    p.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME",
        help="a name this server is reached by (the Host header; repeatable; also $AGENTCIR_ALLOW_HOSTS, "
        "comma-separated). Always allowed: localhost, 127.0.0.1, [::1] and --host; any other Host is "
        "refused (DNS rebinding)",
    )
    p.add_argument(
        "--max-upload-mb",
        type=float,
        default=gf.MAX_UPLOAD_MB,
        help="largest upload, refused while streaming (default 20)",
    )
    p.add_argument(
        "--max-pixels", type=int, default=gf.MAX_PIXELS, help="largest image decoded, in pixels (default 50M)"
    )
    p.add_argument(
        "--uploads-mb", type=float, default=gf.UPLOADS_MB, help="stored uploads kept under this (default 200)"
    )
    p.add_argument(
        "--thumbs-mb", type=float, default=gf.THUMBS_MB, help="thumbnail cache kept under this (default 256)"
    )
    p.add_argument(
        "--no-questions",
        action="store_true",
        help="no history questions (by default the page also asks an ImageSeeker agent about the gallery)",
    )
    p.add_argument(
        "--dup-threshold",
        type=float,
        default=0.97,
        help="results whose image similarity (cosine) is at least this and whose perceptual hashes agree show "
        "once, as one picture with its copies (default 0.97; 0 = no grouping; the page can change it)",
    )
    p.add_argument(
        "--export-max-mb", type=float, default=2048.0, help="largest zip export of a result set (default 2048)"
    )
    p.add_argument(
        "--album-root", help="folder under which the page may copy a result set into an album folder (default: off)"
    )
    _add_watch_args(
        p,
        "follow FOLDER (default: the folder the gallery was indexed from) and index new, changed, "
        "renamed and deleted photos into the gallery as they come; searchable without a restart",
        folder=True,
    )
    _add_recipe_args(p)

    p = sub.add_parser(
        "mcp",
        help="an MCP server over an indexed gallery (tools for agents; agentcir[mcp])",
        description="Serve the gallery's searches as Model Context Protocol tools: composed search, text "
        "search, metadata filter, photo metadata, history questions (ImageSeeker), view photo "
        "and index update, over stdio (default) or streamable HTTP (docs/mcp.md).",
    )
    p.add_argument("--gallery", required=True, help="gallery directory made by `agentcir index`")
    p.add_argument(
        "--transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help="stdio (an MCP client launches this command) or streamable-http (at http://HOST:PORT/mcp)",
    )
    p.add_argument("--host", default="127.0.0.1", help="streamable-http: address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="streamable-http: port (default 8765)")
    p.add_argument("--token", help="streamable-http: bearer token required on every request (default: $AGENTCIR_TOKEN)")
    p.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME",
        help="streamable-http: a name this server is reached by (repeatable; see `agentcir serve`)",
    )
    p.add_argument(
        "--root",
        action="append",
        metavar="DIR",
        help="a folder whose photos may be given as a reference path, besides the gallery's own (repeatable)",
    )
    p.add_argument("--uploads", help="folder for reference images sent as bytes (default <run.root>/_uploads)")
    p.add_argument("--thumbs", help="thumbnail cache folder (default <run.root>/_thumbs)")
    p.add_argument(
        "--max-upload-mb",
        type=float,
        default=gf.MAX_UPLOAD_MB,
        help="largest reference image sent as bytes (default 20)",
    )
    p.add_argument(
        "--max-pixels", type=int, default=gf.MAX_PIXELS, help="largest image decoded, in pixels (default 50M)"
    )
    p.add_argument("--max-k", type=int, default=100, help="most hits a search returns (default 100)")
    p.add_argument("--no-questions", action="store_true", help="no ask_history tool answers (no ImageSeeker agent)")
    p.add_argument("--no-updates", action="store_true", help="no update_index tool")
    _add_recipe_args(p)

    p = sub.add_parser(
        "eval",
        help="metrics of finished runs, compared, submitted",
        description="Print the metrics of run directories (and the FashionIQ average when the runs cover "
        "dress, shirt and toptee). --compare: one table per benchmark (CSV, LaTeX) and a PNG plot; --submit: test-server "
        "files (CIRR, CIRCO); --best-of: DISBench Best@k over independent runs.",
    )
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument(
        "--compare",
        action="store_true",
        help="one table per benchmark (rows labelled by what differs, the paper's numbers of experiment "
        "bundles beside them) and a PNG bar chart per benchmark",
    )
    p.add_argument(
        "--plot",
        default="",
        metavar="PNG",
        help="where --compare writes its plot (default: compare.png beside the first run; several "
        "benchmarks: compare-<benchmark>.png; 'none' = no plot)",
    )
    p.add_argument(
        "--csv", metavar="PATH", help="--compare: write the tables as CSV (several benchmarks: PATH-<benchmark>.csv)"
    )
    p.add_argument(
        "--latex", metavar="PATH", help="--compare: write the tables as LaTeX (booktabs, best value in bold)"
    )
    p.add_argument("--submit", metavar="DIR", help="write the benchmark's submission file(s) of each run into DIR")
    p.add_argument("--best-of", action="store_true", help="DISBench Best@k: best F1 per query over the given runs")

    p = sub.add_parser(
        "build-benchmark",
        help="build a composed benchmark from photos + attributes CSV",
        description="Build (reference, edit text, all correct targets) queries from attribute edits: "
        "each target has the edited value and keeps the reference's other listed attributes. "
        "Example: agentcir build-benchmark --csv ../shared/data/fashion-products/products.csv "
        "--images ../shared/data/fashion-products/images --out runs/_bench/fashion-cir",
    )
    p.add_argument(
        "--csv",
        required=True,
        help="attributes CSV, one row per photo (default columns: id, baseColour, "
        "articleType, subCategory, gender, usage; map others with --edit)",
    )
    p.add_argument("--images", required=True, help="folder of the photos")
    p.add_argument("--out", required=True, help="benchmark folder to write")
    p.add_argument("--queries", type=int, default=400, help="number of queries (default 400)")
    p.add_argument("--seed", type=int, default=0, help="fixes the gallery subset, the edits and their phrasings")
    p.add_argument(
        "--split",
        default="val",
        choices=["val", "train", "all"],
        help="which part of the id hash split forms the gallery (val = unseen by the catalog encoder)",
    )
    p.add_argument("--gallery-size", type=int, default=0, help="cap the gallery (0 = the whole split)")
    p.add_argument("--max-targets", type=int, default=0, help="drop edits with more targets than this (0 = no cap)")
    p.add_argument(
        "--edit",
        action="append",
        metavar="KIND=COLUMN:KEEP,...",
        help="an edit kind, the column it changes and the columns a target keeps, e.g. "
        "colour=color:category,gender (repeatable; replaces the default colour/article/gender/usage edits)",
    )
    p.add_argument("--image-pattern", default="{id}.jpg", help="photo file name from CSV columns (default {id}.jpg)")
    p.add_argument("--id-column", default="id", help="the CSV column of photo ids")
    p.add_argument(
        "--article-column", help="column read as the item noun in phrasings (default: the article edit's column)"
    )
    p.add_argument("--copy-images", action="store_true", help="copy photos into the benchmark folder")
    p.add_argument("--attribution", help="source and licence text for the benchmark's README")

    p = sub.add_parser(
        "build-disbench",
        help="build a DISBench-format photo-history benchmark (multi-hop questions)",
        description="Photo-history questions that need several photos, their dates and places, in the DISBench "
        "layout. From a labelled photo set with synthetic events (--csv, contributors as users), or "
        "from a photo folder with EXIF/XMP metadata (--folder, keywords as labels). Example: "
        "agentcir build-disbench --csv ../shared/data/clothing/images.csv --images "
        "../shared/data/clothing/images --out runs/_bench/clothing-history",
    )
    p.add_argument("--out", required=True, help="benchmark folder to write")
    p.add_argument("--csv", help="labelled photos: one row per photo with a user and a label column")
    p.add_argument("--images", help="folder of the CSV's photos")
    p.add_argument("--folder", help="or: a photo folder with metadata (sub-folders = users)")
    p.add_argument("--user-column", default="sender_id", help="CSV column of the user (default sender_id)")
    p.add_argument("--label-column", default="label", help="CSV column of the label (default label)")
    p.add_argument("--id-column", default="image", help="CSV column of the photo id (default image)")
    p.add_argument(
        "--image-pattern", default="{image}.jpg", help="photo file name from CSV columns (default {image}.jpg)"
    )
    p.add_argument(
        "--exclude-label", action="append", help="labels never used in questions (default: Not sure, Other, Skip)"
    )
    p.add_argument("--min-photos", type=int, default=15, help="users with fewer photos are left out (default 15)")
    p.add_argument("--photos-per-event", type=int, default=6, help="mean photos per synthetic event (default 6)")
    p.add_argument(
        "--queries-per-user", type=int, default=6, help="questions per user, half intra- and half inter-event"
    )
    p.add_argument("--seed", type=int, default=0, help="fixes events, dates, places and phrasings")
    p.add_argument("--copy-images", action="store_true", help="copy photos instead of symlinking them")
    p.add_argument("--attribution", help="source and licence text for the benchmark's README")

    p = sub.add_parser(
        "train-encoder",
        help="train the catalog encoder's image tower (LiT, locked MiniLM text tower)",
        description="Train the catalog encoder's image tower on a folder of photos + an attributes CSV: "
        "agentcir train-encoder data=DIR epochs=30 out=runs/my-encoder. Arguments are key=value "
        "overrides of recipes/train/catalog.yaml. Rerunning the same command resumes from out/last.pt.",
    )
    p.add_argument(
        "overrides", nargs="*", help="key=value overrides of the train recipe (data=DIR epochs=N out=DIR ...)"
    )
    p.add_argument(
        "--config", default="train/catalog", help="train recipe in the recipes folder (default: train/catalog)"
    )
    p.add_argument("--recipes", action="append", metavar="DIR", help="extra recipe folder searched too (repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser(
        "export-onnx",
        help="export an encoder's image and text towers to ONNX",
        description="Export the recipe's encoder (e.g. encoder=catalog) to DIR; serve it with encoder=onnx "
        "encoder.path=DIR (onnxruntime, no torch needed).",
    )
    p.add_argument("--out", required=True, help="folder to write image.onnx, text.onnx, tokenizer.json, encoder.json")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset")
    _add_recipe_args(p)

    p = sub.add_parser(
        "kernels",
        help="the scoring kernels' product-path choices (autotune cache)",
        description="tune: show, reset or measure now the per-CPU choice between BLAS and numba tile "
        "products (agentcir/kernels/tune.py).",
    )
    p.add_argument("action", choices=["tune"], help="tune: the autotune cache")
    p.add_argument(
        "--show", action="store_true", help="print the cache file, its machine identity and choices (default)"
    )
    p.add_argument(
        "--reset", action="store_true", help="delete the cache file: choices are measured again on first use"
    )
    p.add_argument("--run", action="store_true", help="measure every shape class now (a few seconds per dtype)")
    p.add_argument(
        "--dtype",
        action="append",
        choices=["float32", "float16", "bfloat16", "int8"],
        help="with --run: only this gallery dtype (repeatable; float16, bfloat16 and int8 are measured only "
        "in the classes where float32 takes blas, float32 first if it is not cached)",
    )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    from .framework.errors import AgentcirError
    from .registry import ConfigError, RegistryError

    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    # overrides may come after options (`agentcir index DIR --out G encoder=catalog -q`)
    late = [r for r in rest if hasattr(args, "overrides") and ("=" in r or r.startswith(("+", "~")))]
    if len(late) != len(rest):
        parser.error(f"unrecognized arguments: {' '.join(r for r in rest if r not in late)}")
    if late:
        args.overrides = [*args.overrides, *late]
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
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
