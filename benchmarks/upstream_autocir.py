"""AutoCIR beside the authors' released code (coloreyes/AutoCIR), on the same inputs and replies.

    python benchmarks/upstream_autocir.py --autocir PATH/TO/AutoCIR            # the side-by-side check
    python benchmarks/upstream_autocir.py --autocir PATH --export-prompts DIR  # the authors' prompts as files

The check loads ``LLM_modify_caption``, ``check_prompt``, ``LLM_remodify_caption`` and
``extract_suggestions`` from the checkout's ``src/utils.py`` and ``fiq`` from
``src/compute_results.py`` (only those definitions; their model clients replaced by one scripted
replier), drives them in the order of the released ``generate_predictions`` (plan, retrieve, then
``max_check_num`` rounds of check, re-plan, retrieve), and runs ``method=autocir`` with
``upstream_compat=true exclude_reference=false`` (the released FashionIQ evaluation keeps the
reference) on the same gallery, captions, text vectors and replies. The replies cover the released
readings' corners: descriptions with a second colon, in markdown, empty or missing; the stop phrase in
either case; suggestions over several lines or missing; a reply containing "Error". Equal: every
round's descriptions, stop flags, suggestions and top-10 names. Without ``upstream_compat`` the
readings differ exactly where docs/upstream.md says; the count is printed.

``--export-prompts DIR`` writes ``planner.txt`` (``--base`` names the released base prompt of
``src/prompts.py``, e.g. ``structural_modifier_prompt_fashion`` for FashionIQ), ``corrector.txt`` and
``replanner.txt`` with the authors' wording and this project's ``{{placeholders}}``; run AutoCIR
with them by ``method.prompts=DIR``.
"""

from __future__ import annotations

import argparse
import json
import re
import runpy
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _upstream import ScriptedLLM, caption_of, load_defs, make_world, run_method, seed_of, text_vector  # noqa: E402

INSTRUCTIONS = [
    "is red and has long sleeves",
    "make it striped",
    "add a floral print",
    "is darker and shorter",
    "the same in cotton",
    "remove the logo",
    "change to blue",
    "is brighter with a collar",
] * 5
WORDS = ["red", "blue", "striped", "floral", "cotton", "dark", "long", "short"]


def reply(task: str, v: dict) -> str:
    """The scripted model: one deterministic reply per (task, inputs)."""
    if task == "autocir_plan":
        ref, mod = v["reference_caption"], v["modification"]
        return [
            f"Edited Description: a {mod} version of {ref}",
            f"Let me think.\n  Edited Description: target: {mod} on {ref}",
            "I cannot help with that.",
            f"**Edited Description:** {mod} {ref}",
            "Edited Description:",
            f"Edited Description: {ref} but {mod}",
        ][seed_of("plan", ref, mod) % 6]
    if task == "autocir_check":
        h = seed_of("check", v["reference_caption"], v["modification"], v["top_captions"])
        w = WORDS[h // 7 % len(WORDS)]
        return [
            "Step 2: the images match.\nGood retrieval, no more loops needed.",
            "good retrieval, no more loops needed",
            f"Step 3:\nSuggestions: mention {w}\nand be specific",
            f"Some suggestions: add {w}",
            "No idea.",
            f"Step 1: {w}\nSuggestions:\n- say {w}\n- keep the rest",
        ][h % 6]
    if task == "autocir_replan":
        last, sug = v["last_description"], v["suggestions"]
        return [
            f"Edited Description: {last} with {sug[:24]}",
            f"Error noted.\nEdited Description: fixed {last}",
            f"Edited Description: {v['modification']}: {last}",
            "nothing to add",
        ][seed_of("replan", last, sug) % 4]
    raise KeyError(task)


def released_functions(checkout: Path, base: str = "BASE PROMPT"):
    import torch
    import tqdm

    class Factory:  # the released ModelFactory: prompt -> reply
        def __init__(self, *a, **k):
            pass

        def modify_function(self, prompt, openai_key, max_length=800):
            if "The caption you generated last time:" in prompt:
                m = re.search(
                    r"Image Content: (.*?)\n\s*Instruction: (.*?)\n\s*The caption you generated last time: (.*?)\n"
                    r".*suggestions are as follows:(.*?)\n\s*Please think step by step",
                    prompt,
                    re.S,
                )
                return reply(
                    "autocir_replan",
                    {
                        "reference_caption": m.group(1),
                        "modification": m.group(2),
                        "last_description": m.group(3),
                        "suggestions": m.group(4),
                    },
                )
            body = prompt.rsplit("\nImage Content: ", 1)[1]
            ref, mod = body.split("\nInstruction: ", 1)
            return reply("autocir_plan", {"reference_caption": ref, "modification": mod})

    class Handler:  # the released ModelHandler: (top captions, caption, instruction) -> reply
        def __init__(self, *a, **k):
            pass

        def chat_function(self, top_captions, image_caption, relative_caption, max_length=800):
            return reply(
                "autocir_check",
                {
                    "reference_caption": image_caption,
                    "modification": relative_caption,
                    "top_captions": str(top_captions),
                    "n": len(top_captions),
                },
            )

    ns = {
        "tqdm": tqdm,
        "torch": torch,
        "np": np,
        "json": json,
        "ModelFactory": Factory,
        "ModelHandler": Handler,
        "prompts": types.SimpleNamespace(base=base),
    }
    fns = load_defs(
        checkout / "src" / "utils.py",
        ["extract_suggestions", "LLM_modify_caption", "LLM_remodify_caption", "check_prompt"],
        ns,
    )
    import datetime

    ns_cr = {"torch": torch, "np": np, "json": json, "tqdm": tqdm, "datetime": datetime}
    fns.update(load_defs(checkout / "src" / "compute_results.py", ["fiq", "get_time"], ns_cr))
    return fns


def released_run(fns, world, max_check_num: int, tmp: Path) -> list[dict]:
    """The released ``generate_predictions`` loop (FashionIQ evaluation), round by round."""
    import torch

    (tmp / "task" / "t").mkdir(parents=True, exist_ok=True)
    all_captions = [caption_of(q.reference_id) for q in world.queries]
    relative = [q.text for q in world.queries]
    targets = [q.targets[0] for q in world.queries]
    index = torch.from_numpy(world.image_emb.copy())

    def retrieve(captions):
        feats = torch.from_numpy(np.stack([text_vector(c) for c in captions]))
        _, names = fns["fiq"](
            device="cpu",
            predicted_features=feats,
            target_names=targets,
            index_features=index,
            index_names=world.names,
            dataset_name="fashioniq_dress",
            dataset_path=str(tmp),
            task="t",
        )
        return names[:, :10]

    modified = fns["LLM_modify_caption"]("gpt-4o-mini", {}, "prompts.base", all_captions, relative, "", "cpu")
    top = retrieve(modified)
    rounds = [{"descriptions": list(modified), "active": [True] * len(modified), "top": top.tolist()}]
    check_index = [True] * len(modified)
    for _ in range(max_check_num):
        top_captions = [[caption_of(n) for n in names] for names in top]
        suggestions = fns["check_prompt"](
            "gpt_4o_mini", top_captions, all_captions, relative, "", modified, "cpu", check_index
        )
        modified, check_index, used = fns["LLM_remodify_caption"](
            "gpt-4o-mini", "prompts.base", modified, all_captions, relative, suggestions, "", "cpu", check_index
        )
        top = retrieve(modified)
        rounds.append(
            {
                "descriptions": list(modified),
                "active": list(check_index),
                "suggestions": list(used),
                "top": top.tolist(),
            }
        )
    return rounds


def ours_run(world, max_check_num: int, upstream_compat: bool) -> list[dict]:
    from agentcir.framework.methods.autocir import STOP_PHRASE
    from agentcir.registry import METHODS

    from _upstream import NamedCaptioner, TableEncoder

    llm = ScriptedLLM(replier=reply)
    m = METHODS.build(
        "autocir",
        {"max_check_num": max_check_num, "upstream_compat": upstream_compat, "exclude_reference": False, "top_k": 10},
        encoder=TableEncoder(),
        llm=llm,
        captioner=NamedCaptioner(),
    )
    state = run_method(world, m)
    out = []
    for r, stage in enumerate(["plan", *(f"round{i}" for i in range(1, max_check_num + 1))]):
        recs = [state.record(q, stage) for q in world.queries]
        ids = state.stage_candidates[stage].ids[:, :10]
        row = {
            "descriptions": [x["description"] for x in recs],
            "active": [x["active"] for x in recs],
            "top": [[world.names[i] for i in row] for row in ids],
        }
        if r:
            row["suggestions"] = [x.get("suggestions", STOP_PHRASE) for x in recs]
        out.append(row)
    return out


def compare(a: list[dict], b: list[dict]) -> dict[str, int]:
    diff = {}
    for key in ("descriptions", "active", "suggestions", "top"):
        diff[key] = sum(int(x != y) for ra, rb in zip(a, b) if key in ra for x, y in zip(ra[key], rb[key]))
    return diff


def check(checkout: Path, max_check_num: int = 2, n_gallery: int = 200) -> dict:
    """Run both sides; returns the differences per field (compat) and the correct reading's."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        world = make_world(tmp / "world", n_gallery, INSTRUCTIONS)
        theirs = released_run(released_functions(checkout), world, max_check_num, tmp / "released")
        compat = ours_run(world, max_check_num, True)
        correct = ours_run(world, max_check_num, False)
        stopped = sum(not x for x in theirs[-1]["active"])
    return {
        "queries": len(INSTRUCTIONS),
        "rounds": max_check_num,
        "stopped": stopped,
        "upstream_compat": compare(theirs, compat),
        "correct": compare(theirs, correct),
    }


def export_prompts(checkout: Path, out: Path, base_name: str) -> list[Path]:
    """The authors' three prompts with this project's placeholders (planner, corrector, re-planner)."""
    prompts = runpy.run_path(str(checkout / "src" / "prompts.py"))
    if base_name not in prompts:
        raise SystemExit(
            f"{checkout}/src/prompts.py has no prompt '{base_name}'; it has: "
            f"{', '.join(k for k, v in prompts.items() if isinstance(v, str) and not k.startswith('_'))}"
        )
    base = prompts[base_name]

    class Caps:
        def __str__(self):
            return "{{top_captions}}"

        def __len__(self):
            return 987654321

    ns = {"json": json, "requests": None, "time": None, "torch": None, "Enum": object, "auto": lambda: 0}
    handler = load_defs(checkout / "src" / "check_prompt.py", ["ModelHandler"], ns)["ModelHandler"]
    corrector = handler._generate_check_prompt(None, "{{reference_caption}}", "{{modification}}", Caps(), 0)
    corrector = corrector.replace("987654321", "{{n}}")
    seen: list[str] = []

    class Factory:
        def __init__(self, *a, **k):
            pass

        def modify_function(self, prompt, key, max_length=800):
            seen.append(prompt)
            return ""

    import tqdm

    fns = load_defs(
        checkout / "src" / "utils.py",
        ["extract_suggestions", "LLM_remodify_caption"],
        {"tqdm": tqdm, "ModelFactory": Factory, "prompts": types.SimpleNamespace(base=base)},
    )
    fns["LLM_remodify_caption"](
        "gpt-4o-mini",
        "prompts.base",
        ["{{last_description}}"],
        ["{{reference_caption}}"],
        ["{{modification}}"],
        ["@@SUGGESTIONS@@"],
        "",
        "cpu",
        [True],
    )
    replanner = seen[0].replace("@@SUGGESTIONS@@", "{{suggestions}}")
    planner = base + "\nImage Content: {{reference_caption}}\nInstruction: {{modification}}"
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, text in (("planner.txt", planner), ("corrector.txt", corrector), ("replanner.txt", replanner)):
        (out / name).write_text(text, encoding="utf-8")
        files.append(out / name)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--autocir", type=Path, required=True, help="a checkout of coloreyes/AutoCIR")
    ap.add_argument("--rounds", type=int, default=2, help="max_check_num of both runs")
    ap.add_argument("--export-prompts", type=Path, help="write the authors' prompts as prompt files into this folder")
    ap.add_argument("--base", default="structural_modifier_prompt", help="the released base prompt of the planner")
    args = ap.parse_args(argv)
    if not (args.autocir / "src" / "utils.py").is_file():
        ap.error(f"--autocir {args.autocir}: not an AutoCIR checkout (no src/utils.py)")
    if args.export_prompts:
        for f in export_prompts(args.autocir, args.export_prompts, args.base):
            print(f"wrote {f}")
        return 0
    res = check(args.autocir, args.rounds)
    print(f"AutoCIR: {res['queries']} queries, {res['rounds']} rounds, {res['stopped']} stopped by the corrector")
    print(
        "| reading | descriptions differing | stop flags differing | suggestions differing | top-10 lists differing |"
    )
    print("|---|---|---|---|---|")
    for k in ("upstream_compat", "correct"):
        d = res[k]
        print(f"| {k} | {d['descriptions']} | {d['active']} | {d['suggestions']} | {d['top']} |")
    return 0 if not any(res["upstream_compat"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
