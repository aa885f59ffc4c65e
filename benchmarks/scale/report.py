"""Markdown tables of a ``benchmarks/scale/run.py`` results file (pasted into docs/scale.md).

python benchmarks/scale/report.py benchmarks/results/scale-1m.json
"""

from __future__ import annotations

import json
import sys

#: the embed part's variants (benchmarks/scale/run.py), in table order
EMBED_VARIANTS = {
    "job_local": "job, `engine=local`",
    "job_ray": "job, Ray Data",
    "cmd_local": "command, `--engine local`",
    "cmd_ray_join": "command, `--engine ray --address` (joins)",
    "cmd_ray_own": "command, `--engine ray` starting its own Ray",
    "build_local": "its embedding, `--engine local`",
    "build_ray_join": "its embedding, Ray joining",
    "build_ray_own": "its embedding, Ray starting its own",
}


def main(path: str) -> None:
    r = json.loads(open(path).read())
    m = r["machine"]
    print(
        f"Machine: {m['cpu']}, {m['cores']} cores, AMX: {'yes' if m['amx'] else 'no'}; "
        f"load average at start {m['load_at_start'][0]:.1f}.\n"
    )
    if "exact" in r:
        e = r["exact"]
        print(
            f"**Exact search**, {e['n']:,} x {e['dim']} {e['dtype']} ({e['gallery_gb']} GB, memory-mapped), "
            f"top-10, {' / '.join(e['shards'])} shards; "
            f"{e['single']['Q1']['rounds']} interleaved rounds; load average after: {e['load_after'][0]:.1f}. "
            f"One numpy pass over the bytes: {e['numpy_sum_pass_s']} s.\n"
        )
        print(
            "| engine | Q=1 p50 / p99 ms | Q=1 vs single | Q=64 p50 / p99 ms | Q=64 queries/s | Q=64 vs single "
            "| Ray round trip ms | RSS per shard MB |"
        )
        print("|---|---|---|---|---|---|---|---|")
        s = e["single"]
        print(
            f"| single process (numba, {e['cores']} threads) | {s['Q1']['p50_ms']} / {s['Q1']['p99_ms']} | 1 "
            f"| {s['Q64']['p50_ms']} / {s['Q64']['p99_ms']} | {s['Q64']['qps']} | 1 | | |"
        )
        for S, v in e["shards"].items():
            print(
                f"| {S} Ray shard actor(s), {v['threads_per_shard']} thread(s) each | {v['Q1']['p50_ms']} / "
                f"{v['Q1']['p99_ms']} | {v['Q1']['vs_single']} | {v['Q64']['p50_ms']} / {v['Q64']['p99_ms']} "
                f"| {v['Q64']['qps']} | {v['Q64']['vs_single']} | {v['ray_roundtrip_ms_p50']} "
                f"| {max(v['shard_rss_mb'])} |"
            )
        print()
    if "ann" in r:
        a = r["ann"]
        print(
            f"**Approximate search**, clustered {a['n']:,} x {a['dim']} {a['dtype']} ({a['clusters']} Gaussian "
            f"clusters), {a['shards']} shards, 64 held-out queries from the same clusters, recall@10 against the "
            f"exact top-10, times against the exact per-shard scan of the same shards in the same process"
            + (
                f"; load average before / after: {a['load_before'][0]:.1f} / {a['load_after'][0]:.1f}"
                if "load_before" in a
                else ""
            )
            + ".\n"
        )
        print(
            "| index | rows | GB | build s per shard | setting | recall@10 | Q=64 ms (exact) | speed-up Q=64 | Q=1 ms (exact) | speed-up Q=1 |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        skipped = {kind: v["skipped"] for kind, v in a["indexes"].items() if "skipped" in v}
        for kind, v in a["indexes"].items():
            if kind in skipped:
                continue
            knob = "nprobe" if "nprobe" in v["sweep"][0] else "ef_search"
            for row in v["sweep"]:
                mark = " **(first >= 0.95)**" if v["at_recall_0.95"] and row == v["at_recall_0.95"] else ""
                label = f"{kind}" + (f" refine={v['refine']}" if v["refine"] else "")
                print(
                    f"| {label} | {v['rows']:,} | {v.get('index_gb', '')} | {' / '.join(str(round(b)) for b in v['build_s_per_shard'])} "
                    f"| {knob}={row[knob]}{mark} | {row['recall@10']} | {row['Q64_ms']} ({v['exact_Q64_ms']}) "
                    f"| {row['speedup_Q64']}x | {row['Q1_ms']} ({v['exact_Q1_ms']}) | {row['speedup_Q1']}x |"
                )
        print()
        for kind, why in skipped.items():
            print(f"{kind}: not run: {why}.\n")
    if "embed" in r and "job_local_s" not in r["embed"]:  # a results file of the earlier two-variant part
        b = r["embed"]
        print(
            f"**Embedding** (earlier format), {b['images']:,} items: engine=local {b['local_img_s']} images/s, "
            f"Ray Data job {b['ray_img_s']} images/s, ratio {b['ray_vs_local']} (per round: {b.get('ratios')}).\n"
        )
    elif "embed" in r:
        b = r["embed"]
        times = (
            f" (the {b['images'] // b['repeat']:,} photos listed {b['repeat']} times)" if b.get("repeat", 1) > 1 else ""
        )
        print(
            f"**Embedding**, {b['images']:,} fashion photos{times}, encoder `{b['encoder']}`, encoder actors: "
            f"{b['actors']}, medians of {b['rounds']} interleaved rounds; starting the local Ray took "
            f"{b['ray_init_s']} s.\n"
        )
        print("| variant | median s | images/s | vs local | per round |\n|---|---:|---:|---:|---|")
        for v, label in EMBED_VARIANTS.items():
            if f"{v}_s" in b:
                ratio = f"{b[f'{v}_vs_local']}x" if f"{v}_vs_local" in b else "1"
                rounds = " / ".join(str(x) for x in b.get(f"{v}_ratios", []))
                print(f"| {label} | {b[f'{v}_s']} | {b[f'{v}_img_s']} | {ratio} | {rounds} |")
        print(f"\n{'; '.join(f'{k}: {w}' for k, w in b['includes'].items())}.\n")


if __name__ == "__main__":
    main(sys.argv[1])
