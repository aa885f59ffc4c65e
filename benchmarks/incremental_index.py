"""Incremental `agentcir index` vs a full index: what 5 / 50 / 500 changed photos cost.

Not a pytest suite. It copies N photos of ``../shared/data/fashion-products/images`` into a
folder, indexes it (the full index, timed), then for each change size k starts from a copy of
that gallery, changes k photos of the folder and times ``agentcir index FOLDER --out G`` on it
(the update). A change of k photos is k new files, plus a handful of renames and deletions
(k // 10 each, at least one) so every kind of change is in the measured run. Every figure is
one run of the real command in a fresh process (Python start, encoder load, metadata scan,
hashing and embedding included); the full index of the changed folder into a new folder is
timed too, so both sides of each ratio index the same photos.

    python benchmarks/incremental_index.py --n 600 --changes 5,50,500 --out benchmarks/results/incremental_index.md
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import cpu_summary  # noqa: E402  (benchmarks/_data.py: the CPU line of every record)

PHOTOS = ROOT.parent / "shared" / "data" / "fashion-products" / "images"


def index(folder: Path, out: Path, overrides: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "agentcir.cli", "index", str(folder), "--out", str(out), "-q", *overrides],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    took = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"agentcir index failed ({r.returncode}): {r.stderr.strip()}")
    return took, r.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=600, help="photos in the gallery before the change")
    ap.add_argument("--changes", default="5,50,500", help="change sizes (new photos; plus renames and deletions)")
    ap.add_argument("--photos", default=str(PHOTOS), help="photo pool")
    ap.add_argument("--out", help="also write the table (markdown) here")
    ap.add_argument(
        "--no-full-per-change",
        action="store_true",
        help="compare each update with the first full index (of N photos) instead of timing a full "
        "index of each changed folder (halves a large run)",
    )
    ap.add_argument("overrides", nargs="*", help="recipe overrides passed to `agentcir index` (e.g. encoder=catalog)")
    args = ap.parse_args()
    changes = [int(c) for c in args.changes.split(",")]
    pool = sorted(Path(args.photos).glob("*.jpg"))
    need = args.n + max(changes)
    if len(pool) < need:
        raise SystemExit(f"'{args.photos}' holds {len(pool)} photos, {need} are needed")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False
    ).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentcir-incr-") as tmp:
        tmp = Path(tmp)
        base = tmp / "photos"
        base.mkdir()
        for p in pool[: args.n]:
            shutil.copy(p, base / p.name)
        full_s, _ = index(base, tmp / "g0", args.overrides)
        print(f"full index of {args.n} photos: {full_s:.1f} s", flush=True)
        pristine = tmp / "pristine"
        shutil.copytree(base, pristine)  # copies keep mtimes: the update sees the same files at the same paths
        shutil.copytree(tmp / "g0", tmp / "g0-pristine")
        for k in changes:
            folder, gal = base, tmp / "g0"
            shutil.rmtree(folder)
            shutil.rmtree(gal)
            shutil.copytree(pristine, folder)
            shutil.copytree(tmp / "g0-pristine", gal)
            for p in pool[args.n : args.n + k]:
                shutil.copy(p, folder / p.name)
            m = max(1, k // 10)
            olds = sorted(folder.glob("*.jpg"))[: 2 * m]
            (folder / "moved").mkdir()
            for p in olds[:m]:
                p.rename(folder / "moved" / p.name)
            for p in olds[m : 2 * m]:
                p.unlink()
            upd_s, out = index(folder, gal, args.overrides)
            line = next((ln for ln in out.splitlines() if ln.startswith("update:")), "")
            emb = re.search(r"embedded (\d+) image", line)
            if args.no_full_per_change:
                full_k = full_s
            else:
                full_k, _ = index(folder, tmp / f"full-{k}", args.overrides)
                shutil.rmtree(tmp / f"full-{k}")
            rows.append((k, m, m, int(emb.group(1)) if emb else -1, upd_s, full_k))
            print(f"k={k}: update {upd_s:.1f} s ({line}); full index {full_k:.1f} s", flush=True)
    cmd = "python benchmarks/incremental_index.py " + " ".join(sys.argv[1:])
    table = [
        "# Incremental index vs full index\n",
        f"- command: `{cmd}`",
        f"- commit: {commit}",
        f"- CPU: {cpu_summary()} ({os.cpu_count()} cores visible)",
        f"- load average at the end (1/5/15 min; the machine is shared): {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        f"- gallery before the change: {args.n} photos (fashion-products); full index {full_s:.1f} s",
        (
            "- each figure: one run of `agentcir index FOLDER --out G -q` in a fresh process (start, encoder load, "
            "metadata scan, hashing, embedding)\n"
        ),
        (
            "| new | renamed | deleted | embedded | update s | "
            + ("full index of the N photos s" if args.no_full_per_change else "full index of the same folder s")
            + " | speed-up |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k, r, d, e, u, f in rows:
        table.append(f"| {k} | {r} | {d} | {e} | {u:.1f} | {f:.1f} | {f / u:.1f}x |")
    text = "\n".join(table) + "\n"
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
