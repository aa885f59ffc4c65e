"""Integrity sweep: damage every stored artefact of a real offline run the ways disks and people do,
rerun the same command, and count what went wrong.

    python benchmarks/integrity_sweep.py                       # the default recipe (OCTOPUS, offline) on 10 demo queries
    python benchmarks/integrity_sweep.py --random 6 --seed 1   # more seeded random truncations and bit flips
    python benchmarks/integrity_sweep.py --only cache,gallery

One reference run (``agentcir run``) and one reference sweep (``agentcir run -m``) are made in
``<out>/ref``. Each scenario copies that run root, damages one artefact (the named damages of
issue 31, then truncations and bit flips at seeded random offsets of every artefact file), and
runs the same command again in a fresh process (twice at most). Per scenario:

- detected: the damaged file is named in the output (a warning, or an error naming it and the
  command that rebuilds it); a random flip in bytes nothing reads is "harmless" (nothing to detect);
- recovered by rerun: the command ends with rc 0 and the metrics of the reference (final and
  per stage; for a sweep, every job's metrics in ``summary.json``), the scenario's rebuild command
  run first when the error named one;
- silent wrong results: runs that exited 0 with metrics that differ from the reference (target 0);
- tracebacks: outputs holding a Python traceback (target 0).

The table is printed and written to ``<out>/table.md``; ``--save FILE`` also writes it with the
command, the commit and the CPU model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import cpu_summary  # noqa: E402  (benchmarks/_data.py: the CPU line of every record)

RUN = ("dataset.limit=10",)
SWEEP = ("dataset.limit=10", "method=image_only,text_only")


@dataclass
class Row:
    artefact: str
    damage: str
    detected: str = "no"
    recovered: str = "no"
    wrong: int = 0
    tracebacks: int = 0
    notes: str = ""
    group: str = ""


@dataclass
class Scenario:
    group: str
    artefact: str
    damage: str
    inject: Callable[[Path, random.Random], list[Path] | None]  # the damaged files, None: not applicable
    kind: str = "run"  # run | sweep | search
    harmless_ok: bool = False
    fresh: bool = False  # rerun with run.fresh=true: every stage recomputed, so every model call reads the cache


def _metrics(root: Path) -> dict | None:
    for f in sorted(root.glob("*/metrics.json")):
        if f.parent.name.startswith(("_", ".")):
            continue
        m = json.loads(f.read_text())
        return {"final": m["final"], "stages": m["stages"]}
    return None


def _sweep_metrics(root: Path) -> list | None:
    f = root / "sweeps" / "integ" / "summary.json"
    if not f.is_file():
        return None
    return [(j["index"], j.get("status"), j.get("metrics")) for j in json.loads(f.read_text())["jobs"]]


def _names(out: str, names: set[str]) -> bool:
    """Whether a warning or an error in ``out`` names one of the files (not the usual closing lines,
    which mention e.g. ``manifest.json``)."""
    told = [ln for ln in out.splitlines() if "WARNING" in ln or "error:" in ln]
    return any(n in ln for ln in told for n in names)


def _flip(path: Path, offset: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ (1 << bit)]))


class Bench:
    def __init__(
        self,
        out: Path,
        *,
        run: tuple[str, ...] = RUN,
        sweep: tuple[str, ...] = SWEEP,
        extra: tuple[str, ...] = (),
        pythonpath: tuple[str, ...] = (),
        seed: int = 0,
        verbose: bool = False,
    ):
        self.out = Path(out)
        self.extra = tuple(extra)
        self.run_overrides = (*run, *extra)
        self.sweep_overrides = (*sweep, *extra)
        self.seed = seed
        self.verbose = verbose
        self.env = dict(os.environ, TQDM_DISABLE="1")
        self.env.pop("AGENTCIR_CACHE", None)
        self.env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *pythonpath, os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        self.rows: list[Row] = []
        self.ref = self.out / "ref" / "runs"

    # -- commands -------------------------------------------------------------------------
    def cmd(self, kind: str, root: Path, fresh: bool = False) -> list[str]:
        # paths relative to the folder of the run root (the command runs there), so that a copied root
        # is the same sweep (a sweep's manifest records its jobs' overrides, paths included)
        base = [sys.executable, "-m", "agentcir.cli"]
        rel = Path(root.name)
        common = [f"run.root={rel}", f"run.cache={rel / 'cache.sqlite'}", "run.progress=false"]
        if kind == "sweep":
            return [*base, "run", "-q", "-m", *self.sweep_overrides, *common, "--sweep-name", "integ"]
        if kind == "search":
            g = next((root / "_galleries").glob("*/gallery.json")).parent
            return [
                *base,
                "search",
                "--gallery",
                str(g.relative_to(root.parent)),
                "--text",
                "a red shirt",
                "--json",
                *self.extra,
                f"run.root={rel}",
                f"run.cache={rel / 'cache.sqlite'}",
            ]
        return [*base, "run", "-q", *self.run_overrides, *common, *(["run.fresh=true"] if fresh else [])]

    def call(self, kind: str, root: Path, fresh: bool = False) -> tuple[int, str]:
        p = subprocess.run(
            self.cmd(kind, root, fresh),
            env=self.env,
            cwd=root.parent,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        out = p.stdout + p.stderr
        if self.verbose:
            print(f"$ {' '.join(self.cmd(kind, root, fresh))}\n{out}", file=sys.stderr)
        return p.returncode, out

    def result(self, kind: str, root: Path, out: str):
        if kind == "sweep":
            return _sweep_metrics(root)
        if kind == "search":
            try:
                return [
                    (h["id"], h["score"] if h["score"] is None else round(h["score"], 5))
                    for h in json.loads(out.strip().splitlines()[-1])["hits"]
                ]
            except (ValueError, KeyError, IndexError):
                return None
        return _metrics(root)

    def prepare(self) -> None:
        self.ref.mkdir(parents=True, exist_ok=True)
        made = False
        for kind, done in (("run", _metrics), ("sweep", _sweep_metrics)):
            if done(self.ref) is None:
                rc, out = self.call(kind, self.ref)
                if rc != 0:
                    raise SystemExit(f"the reference {kind} failed:\n{out}")
                made = True
        if made:
            c = sqlite3.connect(self.ref / "cache.sqlite")  # everything in the main file (no -wal)
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            c.close()
        self.reference = {"run": _metrics(self.ref), "sweep": _sweep_metrics(self.ref)}
        rc, out = self.call("search", self.ref)
        self.reference["search"] = self.result("search", self.ref, out)

    # -- one scenario ---------------------------------------------------------------------------
    def scenario(self, sc: Scenario, i: int) -> Row:
        root = self.out / "s" / f"{i:03d}" / "runs"
        shutil.rmtree(root.parent, ignore_errors=True)
        shutil.copytree(self.ref, root, symlinks=True)
        rng = random.Random(f"{self.seed}-{i}-{sc.damage}")
        row = Row(sc.artefact, sc.damage, group=sc.group)
        damaged = sc.inject(root, rng)
        if not damaged:
            row.detected, row.recovered, row.notes = "-", "-", "not applicable (no such file)"
            return row
        names = {p.name for p in damaged}
        want = self.reference[sc.kind]
        outs = []
        rc, out = self.call(sc.kind, root, sc.fresh)
        outs.append(out)
        got = self.result(sc.kind, root, out)
        named = _names(out, names)
        if rc == 0 and got != want:
            row.wrong += 1
        rebuild = None
        if rc != 0 and sc.kind == "search" and "agentcir run" in out:
            rebuild = "run"  # the error names the command that rebuilds the gallery: run it
        if rc != 0 or got != want or named:
            if rebuild:
                _, out2 = self.call(rebuild, root)
                outs.append(out2)
            rc, out = self.call(sc.kind, root, sc.fresh)
            outs.append(out)
            got = self.result(sc.kind, root, out)
            if rc == 0 and got != want:
                row.wrong += 1
            if _names(out, names) and not rebuild:
                row.notes = "warned again on the second rerun"
        row.tracebacks = sum("Traceback (most recent call last)" in o for o in outs)
        row.recovered = "yes" if rc == 0 and got == want else "no"
        if named:
            row.detected = "yes"
        elif len(outs) == 1 and sc.harmless_ok:
            row.detected, row.notes = "harmless", "the damaged bytes are not read (results identical, no warning)"
        first = outs[0].strip().splitlines()
        msg = next((ln for ln in first if "WARNING" in ln or "error:" in ln), "")
        if msg and not row.notes:
            msg = re.sub(r"^(WARNING|INFO) agentcir: ", "", msg.strip())
            row.notes = re.sub(r"'?(?:[\w.+-]*/)+([\w.+-]+)'?", r"\1", msg)[:110]
        return row

    def sweep(self, scenarios: list[Scenario]) -> list[Row]:
        self.prepare()
        for i, sc in enumerate(scenarios):
            t0 = time.perf_counter()
            row = self.scenario(sc, i)
            self.rows.append(row)
            print(
                f"[{i + 1}/{len(scenarios)}] {row.artefact} | {row.damage}: detected {row.detected}, recovered "
                f"{row.recovered}, wrong {row.wrong}, tracebacks {row.tracebacks} ({time.perf_counter() - t0:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
        return self.rows


# -- the damages -----------------------------------------------------------------------------------
def _run_dir(root: Path) -> Path:
    return next(d for d in root.iterdir() if (d / "recipe.yaml").is_file())


def _gallery(root: Path) -> Path:
    return next((root / "_galleries").glob("*/gallery.json")).parent


def _llm_row(root: Path, rng: random.Random) -> tuple[sqlite3.Connection, str, bytes]:
    c = sqlite3.connect(root / "cache.sqlite")
    rows = c.execute("SELECT key, value FROM calls WHERE component LIKE 'llm:%' ORDER BY key").fetchall()
    rows = rows or c.execute("SELECT key, value FROM calls ORDER BY key").fetchall()
    key, value = rows[rng.randrange(len(rows))]
    return c, key, bytes(value)


def cache_three_bytes(root: Path, rng: random.Random) -> list[Path]:
    """Three letters of a stored reply changed (the reply stays valid JSON)."""
    c, key, v = _llm_row(root, rng)
    spots = [i for i in range(1, len(v) - 3) if v[i : i + 3].isalpha() and v[i : i + 3].islower()]
    i = spots[rng.randrange(len(spots))]
    new = bytes(((b - 97 + 13) % 26) + 97 for b in v[i : i + 3])
    c.execute("UPDATE calls SET value=? WHERE key=?", (v[:i] + new + v[i + 3 :], key))
    c.commit()
    c.close()
    return [root / "cache.sqlite"]


def cache_broken_json(root: Path, rng: random.Random) -> list[Path]:
    c, key, v = _llm_row(root, rng)
    c.execute("UPDATE calls SET value=? WHERE key=?", (v[: len(v) // 2], key))
    c.commit()
    c.close()
    return [root / "cache.sqlite"]


def truncate(rel: Callable[[Path], Path | None], frac: float | None = 0.5):
    def inject(root: Path, rng: random.Random) -> list[Path] | None:
        p = rel(root)
        if p is None or not p.is_file():
            return None
        size = p.stat().st_size
        os.truncate(p, int(size * frac) if frac is not None else rng.randrange(size))
        return [p]

    return inject


def overwrite(rel: Callable[[Path], Path | None], data: bytes | None = None):
    def inject(root: Path, rng: random.Random) -> list[Path] | None:
        p = rel(root)
        if p is None or not p.is_file():
            return None
        with open(p, "r+b") as f:
            f.write(data if data is not None else rng.randbytes(min(4096, p.stat().st_size)))
        return [p]

    return inject


def replace(rel: Callable[[Path], Path | None], text: bytes):
    def inject(root: Path, rng: random.Random) -> list[Path] | None:
        p = rel(root)
        if p is None or not p.is_file():
            return None
        p.write_bytes(text)
        return [p]

    return inject


def flips(rel: Callable[[Path], Path | None], n: int = 1):
    def inject(root: Path, rng: random.Random) -> list[Path] | None:
        p = rel(root)
        if p is None or not p.is_file():
            return None
        size = p.stat().st_size
        for _ in range(n):
            _flip(p, rng.randrange(size), rng.randrange(8))
        return [p]

    return inject


def mantissa_every_7th(root: Path, rng: random.Random) -> list[Path]:
    """One low mantissa bit flipped in every 7th float of image_emb.npy (all values stay finite)."""
    p = _gallery(root) / "image_emb.npy"
    a = np.load(p)
    bits = a.view(np.uint32 if a.dtype == np.float32 else np.uint16).reshape(-1)
    bits[::7] ^= 1 << 3
    with open(p, "r+b") as f:  # in place: the same header, the same size
        f.seek(p.stat().st_size - a.nbytes)
        f.write(a.tobytes())
    return [p]


def swap_item_rows(root: Path, rng: random.Random) -> list[Path]:
    p = _gallery(root) / "items.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    i = rng.randrange(len(lines) - 1)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    p.write_bytes(b"".join(lines))
    return [p]


def edit_done(root: Path, rng: random.Random) -> list[Path]:
    p = max((_run_dir(root) / "stages").glob("*.done"))
    d = json.loads(p.read_text())
    d["stats"]["calls"] = int(d["stats"].get("calls", 0)) + 7
    p.write_text(json.dumps(d))
    return [p]


def edit_trace_line(root: Path, rng: random.Random) -> list[Path] | None:
    files = [f for f in sorted((_run_dir(root) / "stages").glob("*.jsonl")) if f.stat().st_size]
    if not files:
        return None
    p = files[rng.randrange(len(files))]
    lines = p.read_bytes().splitlines(keepends=True)
    i = rng.randrange(len(lines))
    ln = bytearray(lines[i])
    spots = [j for j in range(len(ln)) if 48 <= ln[j] <= 57 or 97 <= ln[j] <= 122][: len(ln) // 2]
    j = spots[rng.randrange(len(spots))]
    ln[j] = ord("7") if 48 <= ln[j] <= 57 and ln[j] != ord("7") else (ord("x") if ln[j] != ord("x") else ord("y"))
    lines[i] = bytes(ln)
    p.write_bytes(b"".join(lines))
    return [p]


def edit_manifest_metric(root: Path, rng: random.Random) -> list[Path]:
    p = root / "sweeps" / "integ" / "manifest.json"
    m = json.loads(p.read_text())
    job = m["jobs"][0]
    k = next(k for k, v in job["metrics"].items() if isinstance(v, (int, float)))
    job["metrics"][k] = job["metrics"][k] + 10
    p.write_text(json.dumps(m, indent=1))
    return [p]


def edit_job_metrics(root: Path, rng: random.Random) -> list[Path]:
    p = root / "sweeps" / "integ" / "001" / "metrics.json"
    m = json.loads(p.read_text())
    k = next(k for k, v in m["final"].items() if isinstance(v, (int, float)))
    m["final"][k] += 10
    p.write_text(json.dumps(m, indent=1))
    return [p]


def _stage_file(pattern: str, rng_pick: int = -1):
    def rel(root: Path) -> Path | None:
        files = sorted((_run_dir(root) / "stages").glob(pattern))
        return files[rng_pick] if files else None

    return rel


def _caption_file(root: Path) -> Path | None:
    return next(iter(sorted((_gallery(root) / "captions").glob("*.jsonl"))), None)


def _caption_emb(root: Path) -> Path | None:
    return next(iter(sorted((_gallery(root) / "caption_emb").glob("*.npy"))), None)


def named_scenarios() -> list[Scenario]:
    """The damages of issue 31 (points 2 and 3), each as it was reported."""
    cache = lambda r: r / "cache.sqlite"
    rd = lambda name: lambda r: _run_dir(r) / name
    gal = lambda name: lambda r: _gallery(r) / name
    manifest = lambda r: r / "sweeps" / "integ" / "manifest.json"
    return [
        Scenario("cache", "cache.sqlite value", "3 bytes of a stored LLM reply changed", cache_three_bytes, fresh=True),
        Scenario("cache", "cache.sqlite value", "broken JSON in a stored value", cache_broken_json, fresh=True),
        Scenario("cache", "cache.sqlite", "truncated to half", truncate(cache), fresh=True),
        Scenario("cache", "cache.sqlite", "first 4 KB overwritten", overwrite(cache), fresh=True),
        Scenario("stages", "stage arrays (.npz)", "truncated to half", truncate(_stage_file("*.arrays.npz"))),
        Scenario(
            "stages", "stage arrays (.npz)", "one bit flipped (seeded offset)", flips(_stage_file("*.arrays.npz"))
        ),
        Scenario("stages", "stage candidates (.npz)", "truncated to half", truncate(_stage_file("*.candidates.npz"))),
        Scenario("stages", "stage .done marker", "garbage", replace(_stage_file("*.done"), b"\x00\x17garbage{")),
        Scenario("stages", "stage .done marker", "a number edited (valid JSON)", edit_done),
        Scenario("stages", "stage trace (.jsonl)", "one character of a line edited", edit_trace_line),
        Scenario("run", "recipe.yaml", "garbage", replace(rd("recipe.yaml"), b"::: [not yaml\x00")),
        Scenario("run", "inputs.json", "garbage", replace(rd("inputs.json"), b"{broken")),
        Scenario("gallery", "gallery image_emb.npy", "a mantissa bit flipped in every 7th float", mantissa_every_7th),
        Scenario("gallery", "gallery image_emb.npy", "truncated to 3/4", truncate(gal("image_emb.npy"), 0.75)),
        Scenario("gallery", "gallery items.jsonl", "two rows swapped", swap_item_rows),
        Scenario("gallery", "gallery items.jsonl", "truncated to half", truncate(gal("items.jsonl"))),
        Scenario("gallery", "gallery.json", "garbage", replace(gal("gallery.json"), b'{"format": 1, ')),
        Scenario("gallery", "gallery captions", "truncated to half", truncate(_caption_file), fresh=True),
        Scenario("gallery", "gallery caption embeddings", "truncated to half", truncate(_caption_emb), fresh=True),
        Scenario(
            "search",
            "gallery image_emb.npy (agentcir search)",
            "a mantissa bit flipped in every 7th float",
            mantissa_every_7th,
            kind="search",
        ),
        Scenario("sweep", "sweep manifest.json", "a job's metric edited", edit_manifest_metric, kind="sweep"),
        Scenario("sweep", "sweep manifest.json", "truncated to half", truncate(manifest), kind="sweep"),
        Scenario("sweep", "sweep job metrics.json", "a metric edited", edit_job_metrics, kind="sweep"),
    ]


def random_scenarios(n: int) -> list[Scenario]:
    """Truncations and bit flips at seeded random offsets of every artefact file, ``n`` of each per file."""
    files = [
        ("cache", "cache.sqlite", lambda r: r / "cache.sqlite"),
        ("stages", "stage arrays (.npz)", _stage_file("*.arrays.npz", 0)),
        ("stages", "stage candidates (.npz)", _stage_file("*.candidates.npz", 0)),
        ("stages", "stage .done marker", _stage_file("*.done", 0)),
        ("stages", "stage trace (.jsonl)", _stage_file("*.jsonl", 0)),
        ("gallery", "gallery image_emb.npy", lambda r: _gallery(r) / "image_emb.npy"),
        ("gallery", "gallery items.jsonl", lambda r: _gallery(r) / "items.jsonl"),
        ("gallery", "gallery.json", lambda r: _gallery(r) / "gallery.json"),
    ]
    out = []
    for k in range(n):
        for group, name, rel in files:
            fresh = group == "cache"
            out.append(
                Scenario(group, name, f"random truncation #{k + 1}", truncate(rel, None), harmless_ok=True, fresh=fresh)
            )
            out.append(
                Scenario(group, name, f"8 random bit flips #{k + 1}", flips(rel, 8), harmless_ok=True, fresh=fresh)
            )
    return out


def table(rows: list[Row]) -> str:
    lines = [
        "| artefact | damage | detected | recovered by rerun | silent wrong results | tracebacks | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.artefact} | {r.damage} | {r.detected} | {r.recovered} | {r.wrong} | {r.tracebacks} | "
            f"{r.notes.replace('|', '/')} |"
        )
    applicable = [r for r in rows if r.detected != "-"]
    lines += [
        "",
        (
            f"{len(applicable)} scenarios: detected {sum(r.detected == 'yes' for r in applicable)}, harmless "
            f"{sum(r.detected == 'harmless' for r in applicable)}, recovered by rerun "
            f"{sum(r.recovered == 'yes' for r in applicable)}, silent wrong results {sum(r.wrong for r in rows)}, "
            f"tracebacks {sum(r.tracebacks for r in rows)}"
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "runs" / "integrity_sweep"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--random", type=int, default=1, help="random truncations and bit flips per artefact file")
    ap.add_argument("--only", default="", help="groups: cache,stages,run,gallery,search,sweep,random")
    ap.add_argument("--match", default="", help="only the scenarios whose 'artefact | damage' holds this text")
    ap.add_argument("--save", default="", help="also write the table with the command, commit and CPU model here")
    ap.add_argument("--fresh", action="store_true", help="make the reference run again")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.fresh:
        shutil.rmtree(out, ignore_errors=True)
    scenarios = named_scenarios()
    rnd = random_scenarios(args.random)
    for s in rnd:
        s.group = "random"
    scenarios += rnd
    if args.only:
        only = set(args.only.split(","))
        scenarios = [s for s in scenarios if s.group in only]
    if args.match:
        scenarios = [s for s in scenarios if args.match in f"{s.artefact} | {s.damage}"]
    bench = Bench(out, seed=args.seed, verbose=args.verbose)
    t0 = time.perf_counter()
    rows = bench.sweep(scenarios)
    text = table(rows)
    print(text)
    (out / "table.md").write_text(text)
    if args.save:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
        cmd = " ".join(["python", "benchmarks/integrity_sweep.py", *(argv if argv is not None else sys.argv[1:])])
        Path(args.save).write_text(
            f"# Integrity sweep\n\ncommand: `{cmd}`\n\ncommit: {commit}\n\nCPU: {cpu_summary()} "
            f"({os.cpu_count()} logical cores)\n\nrecipe: `agentcir run {' '.join(RUN)}` (the default recipe: OCTOPUS "
            f"with the offline components on the demo); sweep: `agentcir run -m {' '.join(SWEEP)}`; seed {args.seed}; "
            f"{time.perf_counter() - t0:.0f} s\n\n{text}"
        )
    bad = sum(r.wrong + r.tracebacks for r in rows) + sum(r.recovered == "no" for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
