"""Watch mode: the time from a photo landing in a watched folder to it being searchable in a
running ``agentcir serve --watch``.

Not a pytest suite. It copies N photos of ``../shared/data/fashion-products/images`` into a
folder, indexes it (``agentcir index``, in this process), then serves the gallery as ``agentcir
serve --watch`` does (the app's state, the default recipe's encoder, the platform's file events,
the default debounce of 1 s and settle time of 0.5 s) and, one photo at a time, copies a new photo
into the folder and times until a search with a crop of it ("more like this") answers it (in its top 3).
Then a burst of ``--burst`` photos at once, timed until the last is searchable. Each figure is
split into the wait for the folder to settle (debounce + settle, fixed by the settings) and the
update (embedding, the gallery rewritten and swapped in, opened again).

    python benchmarks/watch_latency.py --n 1000 --trials 5 --burst 20 --out benchmarks/results/DATE-watch-latency.md
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _data import cpu_summary  # noqa: E402

PHOTOS = ROOT.parent / "shared" / "data" / "fashion-products" / "images"


def crop_of(path: Path) -> bytes:
    from PIL import Image

    im = Image.open(path).convert("RGB")
    w, h = im.size
    buf = io.BytesIO()
    im.crop((w // 10, h // 10, w - w // 10, h - h // 10)).save(buf, "JPEG")
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="photos in the gallery")
    ap.add_argument("--trials", type=int, default=5, help="single photos landing, one after the other")
    ap.add_argument("--burst", type=int, default=20, help="photos landing at once")
    ap.add_argument("--debounce", type=float, default=1.0)
    ap.add_argument("--photos", default=str(PHOTOS))
    ap.add_argument("--out", help="also write the record (markdown) here")
    args = ap.parse_args()

    from agentcir.framework.indexing import index_folder
    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher
    from agentcir.serve import ServeConfig, create_app

    pool = sorted(Path(args.photos).glob("*.jpg"))
    need = args.n + args.trials + args.burst
    if len(pool) < need:
        raise SystemExit(f"'{args.photos}' holds {len(pool)} photos, {need} are needed")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="agentcir-watch-") as tmp:
        tmp = Path(tmp)
        folder = tmp / "photos"
        folder.mkdir()
        for p in pool[: args.n]:
            shutil.copy(p, folder / p.name)
        recipe = compose([f"run.root={tmp / 'runs'}", "run.progress=false", "method=image_only"])
        t0 = time.perf_counter()
        index_folder(recipe, folder, tmp / "g", metadata=True)
        index_s = time.perf_counter() - t0
        print(f"indexed {args.n} photos in {index_s:.1f} s", flush=True)
        s = Searcher(recipe, tmp / "g")
        app = create_app(
            s,
            uploads=tmp / "up",
            thumbs=tmp / "thumbs",
            config=ServeConfig(warm_up=False, thumbnails=False, reload_s=1.0),
        )
        st = app.state.serve
        st.watch(folder, debounce_s=args.debounce)
        while not st.library["following"]:  # the first update (nothing changed) done
            if st.library["error"]:
                raise SystemExit(st.library["error"])
            time.sleep(0.1)
        s.search(image=folder / pool[0].name, k=1)  # the encoder and kernels loaded
        searchable: list[float] = []
        updates: list[float] = []

        def wait_searchable(p: Path, t_land: float) -> float:
            crop = tmp / "crop.jpg"
            crop.write_bytes(crop_of(p))
            while p.stem not in s.gallery.ids:
                time.sleep(0.02)
            hits = [h.id for h in s.search(image=crop, k=3).hits]
            assert p.stem in hits, (hits, p.stem)  # near-identical catalogue photos may rank first
            return time.perf_counter() - t_land

        for i in range(args.trials):
            p = pool[args.n + i]
            done_before = st.library["updates"]
            t_land = time.perf_counter()
            shutil.copy(p, folder / p.name)
            took = wait_searchable(folder / p.name, t_land)
            while st.library["updates"] == done_before:
                time.sleep(0.01)
            searchable.append(took)
            updates.append(st.library["last_update_s"])
            print(f"photo {i + 1}: searchable {took:.2f} s after landing ({st.library['last_update']})", flush=True)
            time.sleep(0.5)
        burst = pool[args.n + args.trials : need]
        t_land = time.perf_counter()
        for p in burst:
            shutil.copy(p, folder / p.name)
        burst_s = max(wait_searchable(folder / p.name, t_land) for p in burst)
        print(
            f"burst of {len(burst)}: the last searchable {burst_s:.2f} s after the first landed "
            f"({st.library['updates']} updates in all; {st.library['last_update']})",
            flush=True,
        )
        st.close()
        kind = st.library["observer"]
    text = (
        "\n".join(
            [
                "# Watch mode: from a photo landing to it being searchable\n",
                f"- command: `python benchmarks/watch_latency.py {' '.join(sys.argv[1:])}`",
                f"- commit: {commit}",
                f"- CPU: {cpu_summary()} ({os.cpu_count()} cores visible)",
                f"- load average at the end (1/5/15 min; the machine is shared): {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
                f"- gallery: {args.n} photos (fashion-products), encoder catalog, indexed in {index_s:.1f} s",
                f"- served as `agentcir serve --watch` does ({kind} file events, debounce {args.debounce:g} s, settle 0.5 s); "
                "searchable = a search with a crop of the photo answers it in its top 3\n",
                "| what | figure |",
                "|---|---:|",
                f"| one photo: landing to searchable, median of {len(searchable)} | {statistics.median(searchable):.2f} s |",
                f"| one photo: min / max | {min(searchable):.2f} / {max(searchable):.2f} s |",
                f"| one photo: of which first change to gallery swapped in and opened (median) | {statistics.median(updates):.2f} s |",
                f"| burst of {len(burst)} photos: landing of the first to the last searchable | {burst_s:.2f} s |",
            ]
        )
        + "\n"
    )
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
