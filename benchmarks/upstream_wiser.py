"""WISER beside the authors' released code (Physicsmile/WISER), on the same inputs and replies.

    python benchmarks/upstream_wiser.py --wiser PATH/TO/WISER                        # the side-by-side check
    python benchmarks/upstream_wiser.py --wiser PATH --export-prompts DIR            # the authors' prompts as files

The check loads, from the checkout (never vendored), ``extract_suggestions``,
``LLM_modify_editimg_caption``, ``get_pseudo_targets`` and ``LLM_remodify_editimg_caption`` of
``src/utils.py`` and ``circo_fuse2paths`` of ``src/compute_results.py`` (only those definitions;
BAGEL, the verifier model and the file writers replaced by scripted stand-ins that record what they
are asked), and runs them beside :mod:`agentcir.framework.methods.wiser`'s functions under
``upstream_compat`` on the same inputs:

- the caption editor's round-0 replies (a second colon, markdown, empty, missing marker) -> the
  descriptions;
- the verifier's confidences over both paths' candidates (ties, values at the 0.7 threshold) -> the
  pseudo target of each path and which paths stay open;
- the refiner's replies (stop phrase in either case, ``Suggestion:`` over several lines, plural
  ``Suggestions:``, no marker, empty) -> which paths are refined, the instruction the caption editor and
  the image editor get, the image edited (the reference), the new descriptions;
- both paths' candidate lists with confidences -> the fused ranking (sum, max, t2i, name).

``--export-prompts DIR`` writes ``describe.txt`` and ``redescribe.txt`` (the caption editor's two
prompts around the released base prompt of ``src/prompts.py``, ``--base``), ``check_t2i.txt``,
``check_i2i.txt`` (the refiner's) and ``verify.txt`` (the local verifier's) with the authors' wording
and this project's ``{{placeholders}}``; run WISER with them by ``method.prompts=DIR``.

Equal: every one of those. Without ``upstream_compat`` the readings differ where docs/upstream.md
says; the count is printed. Exit status 0 when the compat reading equals the released one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _upstream import load_defs, seed_of  # noqa: E402

INSTRUCTIONS = [
    "is red and has long sleeves",
    "make it striped.",
    "add a floral print?",
    " is darker and shorter",
    "the same in cotton",
    "remove the logo,",
    "change to blue",
    "is brighter with a collar",
] * 4
CAPTIONS = [f"a {w} shirt on a model" for w in ("white", "green", "plain", "long", "silk", "wool", "pink", "grey")] * 4
WORDS = ["red", "blue", "striped", "floral", "cotton", "dark", "long", "short"]
TOP_N = 6


def describe_reply(caption: str, instruction: str) -> str:
    return [
        f"Edited Description: a {instruction} version of {caption}",
        f"Thinking.\n  Edited Description: target: {instruction} on {caption}",
        "I cannot help with that.",
        f"**Edited Description:** {instruction} {caption}",
        "Edited Description:",
        f"Edited Description: {caption} but {instruction}",
    ][seed_of("describe", caption, instruction) % 6]


def check_reply(kind: str, caption: str, instruction: str, retrieved: str) -> str:
    h = seed_of("check", kind, caption, instruction, retrieved)
    w = WORDS[h // 7 % len(WORDS)]
    return [
        "Step 2: it matches.\nGood retrieval, no more loops needed.",
        "good retrieval, no more loops needed",
        f"Step 3:\nSuggestion: mention {w}\nand be specific.",
        f"Suggestions: add {w}",
        "No idea.",
        f'"Suggestion: make it {w}, please."',
        "",
    ][h % 7]


def confidence(ref: str, instruction: str, cand: str) -> float:
    h = seed_of("vqa", ref, instruction, cand)
    return [0.0, 0.25, 0.7, 0.5, 0.1, 0.7000001, 0.25, 0.6, 0.3, 0.45, 0.2, 0.65, 0.7, 0.15, 1.0, 0.35][h % 16]


class Bagel:
    """The released BAGEL stand-in: captions by :func:`describe_reply`, edits recorded."""

    def __init__(self):
        self.prompts: list[str] = []
        self.edits: list[tuple[str, str]] = []

    def generate_caption(self, prompt: str) -> str:
        """The reply to the (caption, instruction) the prompt holds: round 0 ends with
        ``Image Content: <caption>`` / ``Instruction: <instruction>``; the refinement prompt adds a
        full stop to each and ends with a line break."""
        import re

        self.prompts.append(prompt)
        cap, ins = re.search(r"Image Content: (.*)\n\s*Instruction: (.*)", prompt).groups()
        if prompt != prompt.rstrip():
            cap, ins = cap[:-1], ins[:-1]
        return describe_reply(cap, ins)

    def edit_image_no_think(self, path: str, prompt: str) -> dict:
        from PIL import Image

        self.edits.append((path, prompt))
        return {"image": Image.new("RGB", (2, 2))}


def released_functions(checkout: Path):
    import torch
    import tqdm

    files = types.SimpleNamespace(
        write_candidates_file=lambda *a, **k: None,
        write_a_pseudo_target_file=lambda *a, **k: None,
        write_edited_image=lambda path, reference_name, target_name, edit_result_img: os.path.join(
            path, f"{reference_name}_edited_{target_name}.png"
        ),
    )

    class VQA:
        def __init__(self, *a, **k):
            pass

        def chat_function(self, ref, instruction, cand, device):
            return confidence(ref, instruction, cand)

    ns = {
        "tqdm": tqdm,
        "torch": torch,
        "np": np,
        "json": json,
        "os": os,
        "file_utils": files,
        "VQAModelHandler": VQA,
        "prompts": types.SimpleNamespace(base="BASE PROMPT"),
    }
    fns = load_defs(
        checkout / "src" / "utils.py",
        ["extract_suggestions", "LLM_modify_editimg_caption", "get_pseudo_targets", "LLM_remodify_editimg_caption"],
        ns,
    )
    import datetime

    ns_cr = {"torch": torch, "np": np, "json": json, "os": os, "datetime": datetime}
    fns.update(load_defs(checkout / "src" / "compute_results.py", ["circo_fuse2paths", "get_time"], ns_cr))
    return fns


def world(n_gallery: int = 40):
    names = [f"{i:06d}" for i in range(n_gallery)]
    rng = np.random.default_rng(0)
    t2i = [list(rng.choice(names, TOP_N, replace=False)) for _ in INSTRUCTIONS]
    i2i = [list(rng.choice(names, TOP_N, replace=False)) for _ in INSTRUCTIONS]
    refs = [f"ref{i}" for i in range(len(INSTRUCTIONS))]
    return names, t2i, i2i, refs


def released(fns, tmp: Path) -> dict:
    names, t2i, i2i, refs = world()
    ref_paths = [f"/refs/{r}.png" for r in refs]
    bagel = Bagel()
    desc = fns["LLM_modify_editimg_caption"](bagel, "bagel", {}, "prompts.base", CAPTIONS, INSTRUCTIONS, "", "cpu")
    paths1 = [[f"/g/{n}.png" for n in row] for row in t2i]
    paths2 = [[f"/g/{n}.png" for n in row] for row in i2i]
    caps1 = [[f"caption of {n}" for n in row] for row in t2i]
    caps2 = [[f"caption of {n}" for n in row] for row in i2i]
    c1, c2, _r1, _r2, pt1, _cf1, pt2, _cf2, open1, open2 = fns["get_pseudo_targets"](
        "gpt_4o",
        "",
        str(tmp),
        "t",
        1,
        refs,
        "qwen",
        caps1,
        caps2,
        paths1,
        paths2,
        CAPTIONS,
        ref_paths,
        INSTRUCTIONS,
        [True] * len(refs),
        [True] * len(refs),
        "cpu",
    )
    pseudo1 = [os.path.splitext(os.path.basename(p))[0] for p in pt1]
    pseudo2 = [os.path.splitext(os.path.basename(p))[0] for p in pt2]
    sugg1 = [
        check_reply("t2i", CAPTIONS[i], INSTRUCTIONS[i], f"caption of {pseudo1[i]}") if open1[i] else ""
        for i in range(len(refs))
    ]
    sugg2 = [
        check_reply("i2i", CAPTIONS[i], INSTRUCTIONS[i], f"caption of {pseudo2[i]}") if open2[i] else ""
        for i in range(len(refs))
    ]
    open1_before, open2_before = list(open1), list(open2)
    bagel2 = Bagel()
    edited_dir = tmp / "edited"
    edited_dir.mkdir(parents=True, exist_ok=True)
    new_desc, img_paths, open1, open2, used1, used2, _a, _b = fns["LLM_remodify_editimg_caption"](
        bagel_editor=bagel2,
        LLM_model_name="bagel",
        llm_prompt_args="prompts.base",
        last_captions=list(desc),
        last_img_pths=[str(edited_dir / f"last{i}.png") for i in range(len(refs))],
        ref_img_paths=ref_paths,
        all_captions=CAPTIONS,
        relative_captions=INSTRUCTIONS,
        t2i_suggestions=sugg1,
        i2i_suggestions=sugg2,
        openai_key="",
        device="cpu",
        txt_check_index=open1,
        img_check_index=open2,
        reference_names=refs,
        target_names=[f"tg{i}" for i in range(len(refs))],
        query_ids=[],
        edited_image_dir=str(edited_dir),
        loop=1,
        task="t",
        dataset_path=str(tmp),
    )
    (tmp / "task" / "t").mkdir(parents=True, exist_ok=True)
    _, fused = fns["circo_fuse2paths"](
        device="cpu",
        predicted_img_features=None,
        predicted_txt_features=None,
        candidates1=c1,
        candidates2=c2,
        reference_names=refs,
        targets=[],
        target_names=[],
        index_features=None,
        index_names=names,
        query_ids=list(range(len(refs))),
        dataset_name="circo",
        dataset_path=str(tmp),
        task="t",
        split="test",
    )
    edits = {p.split("/")[-1].split(".")[0]: q for p, q in bagel2.edits}
    return {
        "descriptions": list(desc),
        "pseudo_t2i": pseudo1,
        "pseudo_i2i": pseudo2,
        "open_t2i": open1_before,
        "open_i2i": open2_before,
        "refine_t2i": list(open1),
        "refine_i2i": list(open2),
        "suggestion_t2i": list(used1),
        "suggestion_i2i": list(used2),
        "new_descriptions": list(new_desc),
        "edit_instruction": [edits.get(r, "") for r in refs],
        "fused": [list(f) for f in fused],
        "confidences": [[c[2] for c in row] for row in c1],
    }


def ours(compat: bool) -> dict:
    from agentcir.framework.methods.autocir import edited_description
    from agentcir.framework.methods.wiser import (
        STOP_PHRASE,
        best_candidate,
        combined_instruction,
        fuse_two_paths,
        refine_step,
    )

    names, t2i, i2i, refs = world()
    out: dict[str, list] = {
        k: []
        for k in (
            "descriptions",
            "pseudo_t2i",
            "pseudo_i2i",
            "open_t2i",
            "open_i2i",
            "refine_t2i",
            "refine_i2i",
            "suggestion_t2i",
            "suggestion_i2i",
            "new_descriptions",
            "edit_instruction",
            "fused",
            "confidences",
        )
    }
    for i, (cap, ins) in enumerate(zip(CAPTIONS, INSTRUCTIONS)):
        desc = edited_description(describe_reply(cap, ins), ins, upstream_compat=compat)
        out["descriptions"].append(desc)
        conf = {}
        for path, row in (("t2i", t2i[i]), ("i2i", i2i[i])):
            conf[path] = [confidence(f"/refs/{refs[i]}.png", ins, f"/g/{n}.png") for n in row]
            best = best_candidate(conf[path])
            out[f"pseudo_{path}"].append(row[best])
            out[f"open_{path}"].append(not conf[path][best] > 0.7)
        out["confidences"].append(conf["t2i"])
        new_desc, edit = desc, ""
        for path in ("t2i", "i2i"):
            pseudo = out[f"pseudo_{path}"][-1]
            if not out[f"open_{path}"][-1]:
                out[f"refine_{path}"].append(False)
                out[f"suggestion_{path}"].append(STOP_PHRASE)
                continue
            need, sugg = refine_step(check_reply(path, cap, ins, f"caption of {pseudo}"), upstream_compat=compat)
            out[f"refine_{path}"].append(need)
            out[f"suggestion_{path}"].append(sugg if need else STOP_PHRASE)
            if need and path == "t2i":
                instr = combined_instruction(ins, sugg)
                new_desc = edited_description(describe_reply(cap, instr), desc, upstream_compat=compat)
            elif need:
                edit = combined_instruction(ins, sugg)
        out["new_descriptions"].append(new_desc)
        out["edit_instruction"].append(edit)
        out["fused"].append([n for n, _ in fuse_two_paths(t2i[i], conf["t2i"], i2i[i], conf["i2i"])])
    return out


def compare(a: dict, b: dict) -> dict[str, int]:
    return {k: sum(int(x != y) for x, y in zip(a[k], b[k])) for k in a}


def check(checkout: Path) -> dict:
    with tempfile.TemporaryDirectory() as d:
        theirs = released(released_functions(checkout), Path(d))
    return {
        "queries": len(INSTRUCTIONS),
        "refined_t2i": sum(theirs["refine_t2i"]),
        "refined_i2i": sum(theirs["refine_i2i"]),
        "settled": sum(not x for x in theirs["open_t2i"]),
        "upstream_compat": compare(theirs, ours(True)),
        "correct": compare(theirs, ours(False)),
    }


def _verifier_prompt(checkout: Path) -> str:
    """The local verifier's prompt (an f-string inside ``VQAModelHandler._chat_local``), its
    instruction replaced by ``{{modification}}``."""
    import ast

    tree = ast.parse((checkout / "src" / "get_pseudo_targets.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "{{modification}}" for v in node.values]
            text = "".join(parts)
            if "strict visual verifier" in text:
                return text
    raise SystemExit(f"{checkout}/src/get_pseudo_targets.py: no verifier prompt found")


def export_prompts(checkout: Path, out: Path, base_name: str = "structural_modifier_prompt") -> list[Path]:
    """The authors' five prompts with this project's placeholders (method.prompts=DIR)."""
    import runpy

    prompts = runpy.run_path(str(checkout / "src" / "prompts.py"))
    if base_name not in prompts:
        raise SystemExit(
            f"{checkout}/src/prompts.py has no prompt '{base_name}'; it has: "
            f"{', '.join(k for k, v in prompts.items() if isinstance(v, str) and not k.startswith('_'))}"
        )
    base = prompts[base_name]
    ns = {"json": json, "torch": types.SimpleNamespace(device=object), "Enum": object, "auto": lambda: 0}
    handler = load_defs(checkout / "src" / "check_prompt.py", ["ModelHandler"], ns)["ModelHandler"]
    args = ("{{reference_caption}}", "{{modification}}", "{{retrieved_caption}}")
    bagel = Bagel()
    bagel.generate_caption = lambda prompt: bagel.prompts.append(prompt) or ""  # type: ignore[method-assign]
    import tqdm

    fns = load_defs(
        checkout / "src" / "utils.py",
        ["extract_suggestions", "LLM_remodify_editimg_caption"],
        {"tqdm": tqdm, "os": os, "prompts": types.SimpleNamespace(base=base)},
    )
    fns["LLM_remodify_editimg_caption"](
        bagel_editor=bagel,
        LLM_model_name="bagel",
        llm_prompt_args="prompts.base",
        last_captions=[""],
        last_img_pths=[""],
        ref_img_paths=[""],
        all_captions=["{{reference_caption}}"],
        relative_captions=["@@M@@"],
        t2i_suggestions=["Suggestion: @@S@@"],
        i2i_suggestions=[""],
        openai_key="",
        device="cpu",
        txt_check_index=[True],
        img_check_index=[False],
        reference_names=["r"],
        target_names=["t"],
        query_ids=[],
        edited_image_dir=str(out),
        loop=1,
        task="t",
        dataset_path=str(out),
    )
    redescribe = bagel.prompts[0].replace("@@M@@ and @@S@@.", "{{instruction}}")
    files = {
        "describe.txt": base + "\nImage Content: {{reference_caption}}\nInstruction: {{instruction}}",
        "redescribe.txt": redescribe,
        "check_t2i.txt": handler._generate_t2i_check_prompt(None, *args),
        "check_i2i.txt": handler._generate_i2i_check_prompt(None, *args),
        "verify.txt": _verifier_prompt(checkout),
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / n for n in files]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wiser", type=Path, required=True, help="a checkout of Physicsmile/WISER")
    ap.add_argument("--export-prompts", type=Path, help="write the authors' prompts as prompt files into this folder")
    ap.add_argument(
        "--base", default="structural_modifier_prompt", help="the released base prompt of the caption editor"
    )
    args = ap.parse_args(argv)
    if not (args.wiser / "src" / "utils.py").is_file():
        ap.error(f"--wiser {args.wiser}: not a WISER checkout (no src/utils.py)")
    if args.export_prompts:
        for f in export_prompts(args.wiser, args.export_prompts, args.base):
            print(f"wrote {f}")
        return 0
    res = check(args.wiser)
    print(
        f"WISER: {res['queries']} queries; paths settled by the verifier (t2i): {res['settled']}; "
        f"refined: t2i {res['refined_t2i']}, i2i {res['refined_i2i']}"
    )
    keys = list(res["upstream_compat"])
    print("| reading | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for k in ("upstream_compat", "correct"):
        print(f"| {k} | " + " | ".join(str(res[k][x]) for x in keys) + " |")
    return 0 if not any(res["upstream_compat"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
