"""How good are the offline vision components with a given encoder? (issue 5)

On a composed-retrieval folder (default: the bundled demo, 320 product photos with
attribute columns), measures with one encoder:

- captioner=tagger (defaults, plus genders): how often it names the photo's true colour /
  article type / gender, and how often a wrong one (an attribute left out is neither);
- detector=crop_tagger: top-1 label = the true article type;
- verifier=contrast: check("a photo of a <true colour> item") is true and
  check("a photo of a <other colour> item") is false, on the image;
- generator=retrieval: the proxy for "a photo of a <colour> <gender>'s <article>" shares
  colour and article with the photo the description was written from.

Usage: python benchmarks/offline_vision_quality.py [--encoder catalog] [--root DIR] [--limit N]
Prints one JSON object with the figures and the wall time of each component.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import tempfile
import time
from pathlib import Path

from agentcir.framework.gallery import Gallery, GalleryItem
from agentcir.framework.vocab import load_vocab
from agentcir.registry import CAPTIONERS, DETECTORS, ENCODERS, GENERATORS, VERIFIERS

DEMO = Path(__file__).resolve().parent.parent / "agentcir" / "data" / "demo"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default="catalog")
    ap.add_argument("--root", default=str(DEMO))
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()

    root = Path(args.root)
    rows = list(csv.DictReader(open(root / "gallery.csv")))[: args.limit or None]
    colours, articles, genders = load_vocab("colours"), load_vocab("articles"), load_vocab("genders")
    items = []
    for r in rows:
        truth = {
            "colours": colours.normalize(r.get("baseColour", "")),
            "articles": articles.normalize(r.get("articleType", "")),
            "genders": genders.normalize(r.get("gender", "")),
        }
        items.append((root / r["image"], truth, r["id"]))
    enc = ENCODERS.build(args.encoder, {})
    out: dict = {"encoder": args.encoder, "photos": len(items)}

    # the default tagger, plus genders (not tagged by default) to measure them too
    cap = CAPTIONERS.build(
        "tagger",
        {
            "vocabularies": ["colours", "patterns", "genders", "articles"],
            "template": "a photo of a {colours} {patterns} {genders} {articles}",
        },
        encoder=enc,
    )
    t0 = time.perf_counter()
    tags = cap.tags_from_embeddings(enc.encode_images([p for p, _, _ in items]))
    out["tagger_s"] = round(time.perf_counter() - t0, 2)
    for v in ("colours", "articles", "genders"):
        known = [(t, tr[v]) for t, (_, tr, _) in zip(tags, items) if tr[v]]
        named = [(t[v][0][0] if t[v] else None, truth) for t, truth in known]
        out[f"tagger_{v}_right"] = round(sum(n == tr for n, tr in named) / len(named), 3)
        out[f"tagger_{v}_wrong"] = round(sum(n is not None and n != tr for n, tr in named) / len(named), 3)
    out["tagger_example"] = cap.render(tags[0])

    det = DETECTORS.build("crop_tagger", {"vocabularies": ["articles"], "grids": [1, 2]}, encoder=enc)
    t0 = time.perf_counter()
    hits = n = 0
    for p, tr, _ in items:
        if tr["articles"]:
            d = det.detect(p)
            hits += bool(d) and d[0]["label"] == tr["articles"]
            n += 1
    out["crop_tagger_article_top1"] = round(hits / n, 3)
    out["crop_tagger_s"] = round(time.perf_counter() - t0, 2)

    ver = VERIFIERS.build("contrast", {}, encoder=enc)
    rng = random.Random(0)
    t0 = time.perf_counter()
    ok_true = ok_false = n = 0
    for p, tr, _ in items:
        if not tr["colours"]:
            continue
        other = rng.choice([c for c in colours.canonical if c != tr["colours"]])
        ok_true += ver.check(f"a photo of a {tr['colours']} item", candidate=p)
        ok_false += not ver.check(f"a photo of a {other} item", candidate=p)
        n += 1
    out["contrast_true_statement_accepted"] = round(ok_true / n, 3)
    out["contrast_false_statement_rejected"] = round(ok_false / n, 3)
    out["contrast_s"] = round(time.perf_counter() - t0, 2)

    with tempfile.TemporaryDirectory() as tmp:
        g = Gallery.build(Path(tmp) / "g", [GalleryItem(i, str(p)) for p, _, i in items], enc, progress=False)
        gen = GENERATORS.build("retrieval", {}, encoder=enc).bind(g)
        by_path = {str(p): tr for p, tr, _ in items}
        t0 = time.perf_counter()
        same = n = 0
        for p, tr, _ in items:
            if not (tr["colours"] and tr["articles"]):
                continue
            who = {"men": "men's", "women": "women's", "boys": "boys'", "girls": "girls'"}.get(tr["genders"] or "", "")
            proxy = gen.generate(f"a photo of a {tr['colours']} {who} {tr['articles']}", reference=p)
            got = by_path[str(proxy)]
            same += got["colours"] == tr["colours"] and got["articles"] == tr["articles"]
            n += 1
        out["retrieval_proxy_same_colour_and_article"] = round(same / n, 3)
        out["retrieval_s"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
