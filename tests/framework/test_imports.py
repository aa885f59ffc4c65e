"""run.imports: stage outputs from files (no model calls for the imported queries)."""

from __future__ import annotations

import csv
import json
import pickle

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.imports import apply_imports, imports_identity, parse_imports
from agentcir.framework.types import Query

from .datasets.conftest import make_release

QS = [
    Query(
        id=str(i),
        text=f"edit {i}",
        reference_id=f"r/{i}",
        targets=[f"t/{i}"],
        meta={"txt1": f"cap {i}", "release_row": i},
    )
    for i in range(3)
]


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_sources_join_by_key_and_templates(tmp_path):
    f = write_csv(
        tmp_path / "desc.csv",
        ["target", "tar_desc", "enriched"],
        [[f"t/{i}", f"desc {i}", json.dumps([f"p{i}a", f"p{i}b"])] for i in (2, 1, 0)],
    )
    src = parse_imports(
        {
            "perceive": [
                {"file": str(f), "key": "target", "fields": {"target_caption": "tar_desc"}},
                {"fields": {"reference_caption": "{txt1}", "ref": "{reference}"}},
            ],
            "create": {
                "file": str(f),
                "key": "target",
                "fields": {"proxies": "enriched", "visual_proxy": "features:gen/@{release_row}"},
            },
        }
    )
    traces = {}
    rep = apply_imports(traces, QS, src, ["perceive", "create", "retrieve"])
    assert traces["1"]["perceive"] == {"target_caption": "desc 1", "reference_caption": "cap 1", "ref": "r/1"}
    assert traces["2"]["create"] == {"proxies": ["p2a", "p2b"], "visual_proxy": "features:gen/@2"}
    assert rep["perceive"] == {
        "queries": 3,
        "fields": ["ref", "reference_caption", "target_caption"],
        "files": [str(f)],
    }
    # the identity follows the files' content
    before = imports_identity(src)
    write_csv(f, ["target", "tar_desc", "enriched"], [[f"t/{i}", "other", "[]"] for i in range(3)])
    assert imports_identity(src) != before


def test_a_stage_trace_and_query_keyed_files(tmp_path):
    trace = tmp_path / "perceive.jsonl"
    trace.write_text(
        "".join(json.dumps({"query": str(i), "record": {"target_caption": f"x{i}"}}) + "\n" for i in range(3))
    )
    cols = write_csv(
        tmp_path / "q.csv", ["query", "target_caption", "modifications"], [["0", "a", '["m"]'], ["2", "c", "[]"]]
    )
    traces = {}
    apply_imports(traces, QS, parse_imports({"perceive": str(trace)}), ["perceive"])
    assert [traces[q.id]["perceive"]["target_caption"] for q in QS] == ["x0", "x1", "x2"]
    with pytest.raises(InputError, match=r"no row for 1 of 3 queries \(first: query 1, key query\).*partial: true"):
        apply_imports({}, QS, parse_imports({"perceive": str(cols)}), ["perceive"])
    traces = {}
    rep = apply_imports(traces, QS, parse_imports({"perceive": {"file": str(cols), "partial": True}}), ["perceive"])
    assert traces["0"]["perceive"] == {"target_caption": "a", "modifications": ["m"]} and "1" not in traces
    assert rep["perceive"]["queries"] == 2


def test_bad_imports_are_named(tmp_path):
    f = write_csv(tmp_path / "d.csv", ["target", "tar_desc"], [["t/0", "[not json"]])
    with pytest.raises(InputError, match="run.imports.perceive .*: key must be one of query, target"):
        parse_imports({"perceive": {"file": str(f), "key": "nope"}})
    with pytest.raises(InputError, match="run.imports.perceive \\('.*missing.csv'\\): file not found"):
        parse_imports({"perceive": str(tmp_path / "missing.csv")})
    with pytest.raises(InputError, match="without a file every field must be a template"):
        parse_imports({"perceive": {"fields": {"a": "column"}}})
    with pytest.raises(InputError, match="unknown field\\(s\\) colums"):
        parse_imports({"perceive": {"file": str(f), "colums": {}}})
    with pytest.raises(InputError, match="the method has no stage 'perceve'"):
        apply_imports({}, QS, parse_imports({"perceve": str(f)}), ["perceive", "create"])
    with pytest.raises(InputError, match="template '\\{txt9\\}' names 'txt9'"):
        apply_imports({}, QS, parse_imports({"perceive": {"fields": {"a": "{txt9}"}}}), ["perceive"])
    with pytest.raises(InputError, match="reads column 'desc', which the file lacks \\(columns: tar_desc, target\\)"):
        apply_imports(
            {},
            QS[:1],
            parse_imports({"perceive": {"file": str(f), "key": "target", "fields": {"a": "desc"}}}),
            ["perceive"],
        )
    traces = {}  # text that only looks like JSON stays text
    apply_imports(
        traces, QS[:1], parse_imports({"p": {"file": str(f), "key": "target", "fields": {"a": "tar_desc"}}}), ["p"]
    )
    assert traces["0"]["p"] == {"a": "[not json"}
    with pytest.raises(InputError, match="every row needs a 'reference' column"):
        apply_imports(
            {}, QS[:1], parse_imports({"p": {"file": str(f), "key": "reference", "fields": {"a": "tar_desc"}}}), ["p"]
        )
    for name, text in (("bad.json", "{not json"), ("bad.jsonl", '{"query": "0"}\n{not json\n')):
        (tmp_path / name).write_text(text)
        with pytest.raises(InputError, match=f"run.imports.p: '.*{name}'.* is not valid JSON"):
            apply_imports({}, QS[:1], parse_imports({"p": str(tmp_path / name)}), ["p"])


def test_a_csv_cell_keeps_its_line_breaks(tmp_path):
    f = write_csv(tmp_path / "d.csv", ["target", "tar_desc"], [["t/0", "first line\nsecond line"]])
    traces = {}
    apply_imports(
        traces, QS[:1], parse_imports({"p": {"file": str(f), "key": "target", "fields": {"a": "tar_desc"}}}), ["p"]
    )
    assert traces["0"]["p"] == {"a": "first line\nsecond line"}


# -- OCTOPUS on a release, from its files ------------------------------------------------------
ROWS = [(f"r/{i % 4}", f"t/{i}", "make it red") for i in range(9)]
WORDS = "a photo of red blue green shirt watch dog cat the".split()


def _desc(i: int, k: int) -> str:
    return " ".join(WORDS[(i * 3 + k + j) % len(WORDS)] for j in range(3))


def authors_octopus(ref, gen, index, qt, enrich, caps, references, targets, lam=0.2, tau=0.04):
    """zbzzbzzbz/OCTOPUS src/utils.py compute_query_feats_v + src/compute_results.py webvidcovr
    (aggregation_and_retrieval, the fusion, the -10 mask) and eval_recall, in numpy."""
    norm = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    ref, gen, index = norm(ref), norm(gen), norm(index)
    qv = norm(gen + (gen.max(1, keepdims=True) / (ref.max(1, keepdims=True) + 1e-8)) * ref)
    s_r, s_e = ref @ index.T, enrich @ index.T
    score = (np.maximum(s_r[:, None, :] - s_e, 0) / index.shape[0]).sum(-1)
    w = np.exp(score / tau - (score / tau).max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    ens = norm((w[..., None] * enrich).sum(1))
    t_v = ((ens + qt) / 2) @ index.T
    sim = lam * t_v + (1 - lam) * (qv @ caps.T) * t_v
    for i in range(len(references)):
        for j in range(len(targets)):
            if references[i] == targets[j]:
                sim[i][j] = -10
    ranks = np.array([np.where(np.argsort(s)[::-1] == i)[0][0] for i, s in enumerate(sim)])
    return {f"R@{k}": 100.0 * np.mean(ranks < k) for k in (1, 5, 10)}


def test_octopus_runs_on_a_release_with_zero_model_calls(tmp_path):
    pytest.importorskip("transformers", reason="needs the hf extra (the tiny text encoder)")
    from agentcir.framework.recipe import compose
    from agentcir.framework.runner import run_recipe
    from agentcir.registry import ENCODERS

    from ..components.encoders.conftest import make_hf_model

    root = make_release(tmp_path / "rel", ROWS, dim=16)
    (root / "preload" / "gen_tar_desc").mkdir()
    write_csv(
        root / "preload" / "gen_tar_desc" / "enriched_target_desc.csv",
        ["target", "tar_desc", "enriched_desc"],
        [[t, _desc(i, 0), json.dumps([_desc(i, k) for k in range(1, 11)])] for i, (_, t, _) in enumerate(ROWS)],
    )
    model = make_hf_model(tmp_path / "clip", "clip")
    recipe = compose(
        [
            "+experiment=octopus_webvid_release",
            f"dataset.root={root}",
            "encoder.arch=ViT-B/32",
            "encoder.text.name=hf_clip",
            f"+encoder.text.path={model}",
            f"run.root={tmp_path / 'runs'}",
            "run.progress=false",
        ]
    )
    res = run_recipe(recipe, progress=False)
    calls = {k: v for s in res.stats.values() for k, v in s.by_component.items()}
    assert set(calls) == {"encoder:features"}, calls  # no llm, captioner, generator, detector call
    assert set(res.metrics["imports"]) == {"perceive", "create"}
    assert res.metrics["imports"]["create"]["queries"] == len(ROWS)
    assert "Stage `perceive` imported for 9 queries" in (res.dir / "report.md").read_text()

    text = ENCODERS.build("hf_clip", {"path": str(model)})
    load = lambda t: pickle.load(open(root / "preload" / t / "ViT-B/32_webvidcovr_test.pkl", "rb"))  # noqa: E731
    f = lambda t, k: load(t)[k].float().numpy()  # noqa: E731
    enrich = text.encode_texts([_desc(i, k) for i in range(len(ROWS)) for k in range(1, 11)]).reshape(len(ROWS), 10, -1)
    want = authors_octopus(
        f("ref_img_features", "ref_features"),
        f("gen_img_features", "gen_tar_features"),
        f("img_features", "index_features"),
        text.encode_texts([_desc(i, 0) for i in range(len(ROWS))]),
        enrich,
        text.encode_texts([f"caption of {t}" for _, t, _ in ROWS]),
        [r for r, _, _ in ROWS],
        [t for _, t, _ in ROWS],
    )
    got = res.metrics["final"]
    assert {k: got[k] for k in want} == pytest.approx(want)
    assert 0 < got["R@1"] < 100


@pytest.mark.shared
def test_the_octopus_release_imports(shared_dir):
    """Every query of the release gets its records from the release's files (no model)."""
    pytest.importorskip("torch")
    from agentcir.framework.datasets.webvid_covr import WebVidCoVR
    from agentcir.framework.recipe import compose

    root = shared_dir / "data" / "releases" / "octopus-webvid-covr"
    if not root.is_dir():
        pytest.skip(f"needs {root}")
    queries = WebVidCoVR(WebVidCoVR.Config(root=str(root))).queries()
    spec = compose(["+experiment=octopus_webvid_release", f"dataset.root={root}"])["run"]["imports"]
    traces = {}
    rep = apply_imports(traces, queries, parse_imports(spec), ["gallery_captions", "perceive", "create", "retrieve"])
    assert rep["perceive"]["queries"] == rep["create"]["queries"] == len(queries) == 2554
    rows = {r["target"]: r for r in csv.DictReader(open(root / "preload/gen_tar_desc/enriched_target_desc.csv"))}
    caps = pickle.load(open(root / "preload/image_captions/preload_image_captions.pkl", "rb"))
    for i in (0, 511, 512, 2553):  # around the row the release lacks (CSV row 512)
        q = queries[i]
        p, c = traces[q.id]["perceive"], traces[q.id]["create"]
        assert (
            p["target_caption"] == rows[q.targets[0]]["tar_desc"] and p["reference_caption"] == caps["ref_captions"][i]
        )
        assert c["proxies"] == json.loads(rows[q.targets[0]]["enriched_desc"]) and len(c["proxies"]) == 10
        assert c["visual_proxy"] == f"features:gen_img_features/@{i}"
        assert caps["reference_names"][i] == q.reference_id and caps["target_names"][i] == q.targets[0]
