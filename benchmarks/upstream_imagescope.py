"""ImageScope beside the authors' released code (pengfei-luo/ImageScope), on the same inputs and replies.

    python benchmarks/upstream_imagescope.py --imagescope PATH/TO/ImageScope

Loads the released ``ImageScope`` class from the checkout's ``imagescope.py`` and
``llm_load_and_inference_ray``, ``mllm_load_and_inference_ray``, ``clip_rank_retrieval_ray`` and
``stage3_large_mllm_inference_batch_cmp_ray`` from ``utils/inference_entrypoint_ray.py`` (only those
definitions, ``@ray.remote`` dropped), with stand-ins below the code: a vLLM ``LLM`` whose
``generate`` answers with one scripted replier, CLIP returning this check's seeded vectors, images
that remember their paths, Ray running the tasks in process, and CUDA tensors left on the CPU. It
runs the released ``stage1_reason``, ``stage1_retrieve``, ``stage2_verify``, ``stage2_rerank`` and
``stage3_evaluate`` (dataset ``FashionIQ-dress``, split ``valid``, ``top_k`` 20, ``alpha`` 3,
``tau`` 0.15) and ``method=imagescope upstream_compat=true exclude_reference=false`` on the same
gallery, captions, vectors and replies. The replies cover the released readings' corners: fenced and
bare JSON, trailing commas, entries that are not pairs, a missing or empty ``step2``, no JSON, answers
as strings and as JSON booleans. Equal: the target descriptions, the questions, the stage-2 values and
the top-50 names after stages 1, 2 and 3. Without ``upstream_compat`` the readings differ where
docs/upstream.md says; the count is printed. Needs torch and json_repair (``pip install
agentcir[upstream]``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import math
import pickle
import re
import sys
import tempfile
import types
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _upstream import (
    NamedCaptioner,
    ScriptedLLM,
    ScriptedVerifier,
    TableEncoder,
    caption_of,
    load_defs,  # noqa: E402
    make_world,
    run_method,
    seed_of,
    text_vector,
)

INSTRUCTIONS = [
    "is red and has long sleeves",
    "make it striped",
    "add a floral print",
    "is darker and shorter",
    "the same in cotton",
    "remove the logo",
    "change to blue",
    "is brighter with a collar",
] * 4
WORDS = ["red", "blue", "striped", "floral", "cotton", "dark", "long", "short", "collar", "logo"]
PREFIX = "Answer the question with Yes or No. "


def fence(text: str) -> str:
    return f"Let me reason.\n```json\n{text}\n```\nThat is all."


def reply(task: str, v: dict) -> str:
    """The scripted reasoner: one deterministic reply per (task, inputs)."""
    if task == "imagescope_reason":
        inst, ref = v["instruction"], v["ref_image_desc"]
        h = seed_of("reason", inst, ref)
        step1 = [["Modification", inst], ["Retention", f"keep {ref.split()[1]}"]]
        step2 = [f"{WORDS[(h + i) % 10]} {inst}" for i in range(3)]
        good = json.dumps({"step1": step1, "step2": step2}, indent=1)
        return [
            fence(good),
            fence(good[:-1].rstrip() + ",\n}"),  # a trailing comma
            "The result: " + json.dumps({"step1": step1, "step2": step2[:2]}),
            "I cannot answer in JSON.",
            fence(json.dumps({"step1": step1, "step2": []})),
            fence(json.dumps({"step1": step1})),
        ][h % 6]
    if task == "imagescope_propositions":
        inst = v["instruction"]
        h = seed_of("props", inst, v["atomic_inst"])
        qs = [f"Is it {WORDS[(h >> i) % 10]}?" for i in range(3)]
        pairs = [[qs[0], "True"], [qs[1], "False"], [qs[2], "True"]]
        kind = h % 4 if inst != INSTRUCTIONS[0] else 0  # the released stage 2 fails when query 0 has no questions
        if kind == 0:
            return fence(json.dumps({"step1": qs, "step2": pairs}))
        if kind == 1:
            return fence(json.dumps({"step1": qs, "step2": [*pairs[:2], ["not a pair"]]})[:-2] + "],}")
        if kind == 2:
            return json.dumps({"step1": qs, "step2": pairs})
        return fence(json.dumps({"step1": qs, "step2": [[qs[0], True], [qs[1], False]]}))
    raise KeyError(task)


def answer(kind: str, text: str, candidate: str) -> bool:
    """The scripted MLLM / evaluator verdict on a candidate."""
    h = seed_of(kind, text, candidate)
    return h % 2 == 0 if kind == "check" else h % 10 < 3


class _Out:
    def __init__(self, text: str):
        self.outputs = [types.SimpleNamespace(text=text, token_ids=[0] * 3)]
        self.prompt_token_ids = [0] * 5


class _Image:
    """A PIL stand-in that remembers the file it was opened from."""

    def __init__(self, path=None, parts=None):
        self.path, self.parts = path, parts
        self.size = (8, 8)

    def convert(self, *_):
        return self

    def resize(self, *_):
        return self


class _Tokenizer:
    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return messages[0]["content"]

    def convert_tokens_to_ids(self, t):
        return 0


class _LLM:
    """vLLM's ``LLM``: ``generate`` answers each input with the scripted replies."""

    def __init__(self, *a, **k):
        pass

    def get_tokenizer(self):
        return _Tokenizer()

    def generate(self, inputs, sampling_params=None):
        out = []
        for x in inputs:
            if isinstance(x, str):  # a reasoner prompt: "R1\0instruction\0reference" / "R2\0instruction\0atomic"
                tag, a, b = x.split("\x00")
                task = "imagescope_reason" if tag.endswith("R1") else "imagescope_propositions"
                keys = (
                    ("instruction", "ref_image_desc") if task == "imagescope_reason" else ("instruction", "atomic_inst")
                )
                out.append(_Out(reply(task, dict(zip(keys, (a, b))))))
                continue
            prompt, img = x["prompt"], x["multi_modal_data"]["image"]
            if "EVAL\x00" in prompt:  # the stage-3 evaluator on [reference, candidate]
                inst = prompt.split("EVAL\x00", 1)[1]
                ok = answer("verify", inst, Path(img.parts[1].path).stem)
                out.append(_Out("ANSWER: Yes\nIt matches." if ok else "ANSWER: No\nIt does not."))
            else:  # the stage-2 verifier: "Answer the question with Yes or No. <q>"
                q = prompt.split(PREFIX, 1)[1].rstrip()
                out.append(_Out("Yes." if answer("check", q, Path(img.path).stem) else "No, it is not."))
        return out


class _Remote:
    def __init__(self, fn):
        self.fn = fn

    def options(self, **_):
        return self

    def remote(self, *a):
        return self.fn(*a)


class _Clip:
    """CLIP's text tower returning this check's text vectors (token ids index a text table)."""

    texts: list[str] = []

    def __init__(self, torch):
        self.torch = torch

    def to(self, *_):
        return self

    def eval(self):
        return self

    def get_text_features(self, input_ids=None, **_):
        return self.torch.from_numpy(np.stack([text_vector(_Clip.texts[int(i)]) for i in input_ids]))

    def get_image_features(self, pixel_values=None, **_):
        return self.torch.ones(pixel_values.shape[0], 16)


def released(checkout: Path):
    import torch
    import torch.nn.functional as F
    from json_repair import repair_json
    from tqdm import tqdm

    def tokenizer(texts, **_):
        start = len(_Clip.texts)
        _Clip.texts.extend(texts)
        return {"input_ids": torch.arange(start, start + len(texts))}

    processor = types.SimpleNamespace(
        tokenizer=tokenizer, image_processor=lambda imgs, **_: {"pixel_values": torch.zeros(len(imgs), 3)}
    )
    pil = types.SimpleNamespace(open=lambda p: _Image(str(p)), new=lambda *a, **k: _Image(None))
    ns_ray = {
        "torch": torch,
        "F": F,
        "np": np,
        "tqdm": tqdm,
        "defaultdict": defaultdict,
        "copy": copy,
        "deepcopy": copy.deepcopy,
        "time": types.SimpleNamespace(time=lambda: 0.0, sleep=lambda s: None),
        "Image": pil,
        "LLM": _LLM,
        "SamplingParams": lambda **k: k,
        "CLIPModel": types.SimpleNamespace(from_pretrained=lambda p: _Clip(torch)),
        "AutoProcessor": types.SimpleNamespace(from_pretrained=lambda p: processor),
        "concatenate_images_with_reference": lambda imgs: _Image(None, parts=imgs),
    }
    fns = load_defs(
        checkout / "utils" / "inference_entrypoint_ray.py",
        [
            "llm_load_and_inference_ray",
            "mllm_load_and_inference_ray",
            "clip_rank_retrieval_ray",
            "stage3_large_mllm_inference_batch_cmp_ray",
        ],
        ns_ray,
    )
    ns = {
        "os": __import__("os"),
        "torch": torch,
        "json": json,
        "pickle": pickle,
        "deepcopy": copy.deepcopy,
        "repair_json": repair_json,
        "re": re,
        "math": math,
        "np": np,
        "defaultdict": defaultdict,
        "tqdm": tqdm,
        "time": types.SimpleNamespace(time=lambda: 0.0, sleep=lambda s: None),
        "datetime": __import__("datetime").datetime,
        "ray": types.SimpleNamespace(init=contextlib.nullcontext, get=lambda tasks: list(tasks)),
        **{k: _Remote(f) for k, f in fns.items()},
    }
    return load_defs(checkout / "imagescope.py", ["ImageScope"], ns)["ImageScope"]


@contextlib.contextmanager
def cuda_on_cpu():
    """``tensor.to("cuda")`` leaves the tensor where it is (the released code moves to CUDA by name)."""
    import torch

    orig = torch.Tensor.to

    def to(self, *a, **k):
        if (a and a[0] == "cuda") or k.get("device") == "cuda":
            return self
        return orig(self, *a, **k)

    torch.Tensor.to = to
    try:
        yield
    finally:
        torch.Tensor.to = orig


def released_run(cls, world, tmp: Path, k: int = 20, alpha: int = 3, tau: float = 0.15) -> list[dict]:
    obj = cls.__new__(cls)
    obj.args = argparse.Namespace(
        dataset="FashionIQ-dress",
        split="valid",
        subset=False,
        tau=tau,
        alpha=alpha,
        top_k=k,
        llm_path="llm",
        mllm_path="InternVL2-mllm",
        eval_mllm_path="InternVL2-eval",
        clip_path="clip",
    )
    obj.top_k, obj.num_of_gpu, obj.dir_name = k, 1, str(tmp)
    obj.logger = logging.getLogger("imagescope-released")
    obj.stage1_reasoner_prompt = "R1\x00[[INSTRUCTION]]\x00[[REF_IMAGE_DESC]]"
    obj.stage2_reasoner_prompt = "R2\x00[[INSTRUCTION]]\x00[[ATOMIC_INST]]"
    obj.stage3_evaluator_prompt = "EVAL\x00[[INSTRUCTION]]"
    obj.image_split = dict(world.paths)
    obj.image_caption_dict = {n: caption_of(n) for n in world.names}
    obj.load_image_db = lambda filter_dict: (world.image_emb.copy(), world.caption_emb.copy(), np.array(world.names))
    obj.states = defaultdict(dict)
    obj.task_data = [{"instruction": q.text} for q in world.queries]
    for i, q in enumerate(world.queries):
        obj.states[i]["info"] = {
            "ref_img": q.reference_id,
            "ref_img_path": world.paths[q.reference_id],
            "ref_img_desc": caption_of(q.reference_id),
            "inst": q.text,
            "tgt_img": q.targets[0],
            "tgt_img_path": world.paths[q.targets[0]],
        }
    with cuda_on_cpu(), contextlib.redirect_stdout(None):
        obj.stage1_reason()
        obj.stage1_retrieve()
        obj.stage2_verify()
        obj.stage2_rerank()
        obj.stage3_evaluate()
    out = []
    for i in range(len(world.queries)):
        r = obj.states[i]["result"]
        atomic = r["s2_atomic"].get("json", {}).get("step2") if "json" in r["s2_atomic"] else None
        out.append(
            {
                "step2": list(r["stage1_reason"]["json"]["step2"]),
                "questions": None if atomic is None else [x[0] for x in atomic],
                "values": list(r.get("s2_verify", {}).get("candidate_satisfy_value", [])),
                "retrieve": r["stage1_retrieve"]["sorted_names"][:50],
                "rerank": r["s2_rerank"]["sorted_names"][:50],
                "evaluate": r["stage3_eval"]["sorted_names"][:50],
            }
        )
    return out


def ours_run(world, upstream_compat: bool, k: int = 20, alpha: int = 3) -> list[dict]:
    from agentcir.registry import METHODS

    m = METHODS.build(
        "imagescope",
        {"upstream_compat": upstream_compat, "exclude_reference": False, "top_k": 50, "k": k, "alpha": alpha},
        encoder=TableEncoder(),
        llm=ScriptedLLM(replier=reply),
        captioner=NamedCaptioner(),
        verifier=ScriptedVerifier(answer=answer),
    )
    state = run_method(world, m)
    out = []
    for i, q in enumerate(world.queries):
        props = state.record(q, "propositions")["questions"]
        out.append(
            {
                "step2": state.record(q, "reason")["step2"],
                "questions": None if props is None else [x["question"] for x in props],
                "values": state.record(q, "rerank")["values"],
                **{
                    s: [world.names[j] for j in state.stage_candidates[st].ids[i, :50]]
                    for s, st in (("retrieve", "retrieve"), ("rerank", "rerank"), ("evaluate", "verify"))
                },
            }
        )
    return out


FIELDS = ("step2", "questions", "values", "retrieve", "rerank", "evaluate")


def compare(a: list[dict], b: list[dict]) -> dict[str, int]:
    return {f: sum(int(x[f] != y[f]) for x, y in zip(a, b)) for f in FIELDS}


def check(checkout: Path, n_gallery: int = 200) -> dict:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        world = make_world(tmp / "world", n_gallery, INSTRUCTIONS)
        (tmp / "released").mkdir()
        theirs = released_run(released(checkout), world, tmp / "released")
        compat = ours_run(world, True)
        correct = ours_run(world, False)
    moved = sum(int(x["evaluate"][:3] != x["rerank"][:3]) for x in theirs)
    return {
        "queries": len(INSTRUCTIONS),
        "stage3_moved": moved,
        "upstream_compat": compare(theirs, compat),
        "correct": compare(theirs, correct),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--imagescope", type=Path, required=True, help="a checkout of pengfei-luo/ImageScope")
    args = ap.parse_args(argv)
    if not (args.imagescope / "imagescope.py").is_file():
        ap.error(f"--imagescope {args.imagescope}: not an ImageScope checkout (no imagescope.py)")
    res = check(args.imagescope)
    print(f"ImageScope: {res['queries']} queries, stage 3 moved a candidate to the front in {res['stage3_moved']}")
    print("| reading | " + " | ".join(f"{f} differing" for f in FIELDS) + " |")
    print("|---|" + "---|" * len(FIELDS))
    for key in ("upstream_compat", "correct"):
        print(f"| {key} | " + " | ".join(str(res[key][f]) for f in FIELDS) + " |")
    return 0 if not any(res["upstream_compat"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
