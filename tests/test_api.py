"""The public Python API (``import agentcir as ac``): light to import, its docstring examples run
here, and each function gives what its command gives (index metadata, search JSON, run files)."""

from __future__ import annotations

import csv
import doctest
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import agentcir as ac
from agentcir.framework.interfaces import Encoder

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "agentcir" / "data" / "demo"
HEAVY = ("torch", "numba", "transformers", "open_clip", "faiss", "hydra", "omegaconf", "onnxruntime", "triton")


@ac.register("encoder", "api_pixels")
class Pixels(Encoder):
    """A fast test encoder: an image is its 4x4 thumbnail, a text its hashed words."""

    @dataclass
    class Config:
        batch_size: int = 32
        scale: float = 1.0

    dim = 48

    def _embed_images(self, images):
        return np.stack([np.asarray(im.resize((4, 4)), np.float32).ravel() * self.cfg.scale for im in images])

    def _embed_texts(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, sum(map(ord, w)) % self.dim] += 1.0
        return out + 1e-3


def _write_exif(src: Path, dst: Path, taken: str, lat: float, lon: float) -> None:
    from PIL import Image

    def dms(x: float):
        d, m = int(x), int((x - int(x)) * 60)
        return (float(d), float(m), round(((x - d) * 60 - m) * 60, 2))

    im = Image.open(src).convert("RGB")
    exif = Image.Exif()
    exif[0x010F], exif[0x0110] = "NIKON CORPORATION", "NIKON D750"
    exif.get_ifd(0x8769)[0x9003] = taken
    exif.get_ifd(0x8825).update({1: "N", 2: dms(lat), 3: "E", 4: dms(lon)})
    dst.parent.mkdir(parents=True, exist_ok=True)
    im.save(dst, "JPEG", exif=exif, quality=90)


@pytest.fixture(scope="session")
def photos(tmp_path_factory) -> Path:
    """12 demo photos: 10 as they are, 2 in an album folder with EXIF date, camera and GPS."""
    d = tmp_path_factory.mktemp("api") / "photos"
    d.mkdir()
    demo = sorted((DEMO / "images").iterdir())
    for p in demo[:10]:
        shutil.copy(p, d / p.name)
    _write_exif(demo[10], d / "Trip 2019" / "rome.jpg", "2019:05:03 10:00:00", 41.9028, 12.4964)
    _write_exif(demo[11], d / "Trip 2019" / "florence.jpg", "2019:05:07 09:15:00", 43.7696, 11.2558)
    return d


@pytest.fixture(scope="session")
def bench(tmp_path_factory) -> Path:
    """A tiny composed benchmark cut from the demo: its first 3 queries, their references and
    targets and 12 more photos (the agentcir folder format)."""
    d = tmp_path_factory.mktemp("api") / "bench"
    (d / "images").mkdir(parents=True)
    queries = [json.loads(line) for line in (DEMO / "queries.jsonl").read_text().splitlines()[:3]]
    with open(DEMO / "gallery.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    wanted = {q["reference_id"] for q in queries} | {t for q in queries for t in q["targets"]}
    wanted |= {r["id"] for r in rows[:12]}
    keep = [r for r in rows if r["id"] in wanted]
    for r in keep:
        shutil.copy(DEMO / r["image"], d / r["image"])
    with open(d / "gallery.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)
    (d / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return d


# -- light import -------------------------------------------------------------------------------
def test_import_is_light_and_names_load_on_use():
    code = (
        "import sys, agentcir as ac\n"
        "before = [m for m in sys.modules if m == 'agentcir.api' or m.split('.')[0] in HEAVY]\n"
        "names = sorted(ac.__all__); ac.list('method'); ac.Retriever; ac.RunResult\n"
        "after = [m for m in sys.modules if m.split('.')[0] in HEAVY]\n"
        "print(before, after, 'agentcir.api' in sys.modules, 'compose' in dir(ac))"
    )
    out = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{code}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[] [] True True", out
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ac.nope  # noqa: B018


def test_every_public_name_has_an_example():
    from agentcir import api

    for name in api.__all__:
        doc = getattr(api, name).__doc__ or ""
        assert ">>> " in doc, f"agentcir.api.{name} has no example"
    assert ">>> " in (api.Retriever.search.__doc__ or "")


# -- the docstring examples, run --------------------------------------------------------------------
def _examples():
    from agentcir import api

    tests = doctest.DocTestFinder().find(api, "agentcir.api")
    return sorted((t for t in tests if t.examples), key=lambda t: t.name)


@pytest.fixture(scope="session")
def examples_dir(tmp_path_factory) -> Path:
    """Where the examples run: their run directories, galleries and files land here, shared, so
    that a gallery or a run one example made is reused by the next (each example stays whole)."""
    return tmp_path_factory.mktemp("examples")


@pytest.mark.parametrize("test", _examples(), ids=lambda t: t.name.removeprefix("agentcir.api."))
def test_docstring_example(test, photos, bench, examples_dir, monkeypatch):
    monkeypatch.chdir(examples_dir)
    test.globs = {**test.globs, "photos": str(photos), "bench": str(bench)}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)


# -- components registered from Python -----------------------------------------------------------------
def test_a_registered_component_needs_no_recipe_file(tmp_path):
    r = ac.compose("encoder=api_pixels", "encoder.scale=2")
    assert r["encoder"] == {"name": "api_pixels", "batch_size": 32, "scale": 2.0}
    with pytest.raises(ac.ConfigError, match="field .scale."):
        ac.compose("encoder=api_pixels", "encoder.scale=big")
    # a recipe file of the same name wins over the registered defaults
    (tmp_path / "encoder").mkdir()
    (tmp_path / "encoder" / "api_pixels.yaml").write_text("name: api_pixels\nbatch_size: 5\n")
    assert ac.compose("encoder=api_pixels", recipes=tmp_path)["encoder"]["batch_size"] == 5
    # `none` selects no component of a group, file or not
    assert ac.compose("method=text_only", "verifier=none")["verifier"] == {"name": "none"}


def test_an_unknown_key_says_which_file_to_add(tmp_path):
    with pytest.raises(ac.InputError) as e:
        ac.compose("encoder=api_nowhere", recipes=tmp_path)
    msg = str(e.value)
    assert f"{tmp_path / 'encoder' / 'api_nowhere.yaml'}" in msg and f"--recipes {tmp_path}" in msg
    assert "agentcir.register('encoder', 'api_nowhere')" in msg and "api_pixels" in msg
    assert "Could not find" not in msg


def test_the_command_selects_a_component_registered_in_its_process(photos, tmp_path, capsys):
    from agentcir.cli import main

    assert main(["index", str(photos), "--out", str(tmp_path / "g"), "encoder=api_pixels", "-q"]) == 0
    assert "indexed 12 image(s)" in capsys.readouterr().out


# -- the same results as the commands -----------------------------------------------------------------
def test_index_gives_the_commands_gallery_with_photo_metadata(photos, tmp_path, capsys):
    from agentcir.cli import main
    from agentcir.framework.gallery import Gallery

    assert main(["index", str(photos), "--out", str(tmp_path / "cli"), "encoder=api_pixels", "-q"]) == 0
    printed = capsys.readouterr().out
    report = ac.index(photos, "encoder=api_pixels", out=tmp_path / "api")
    assert isinstance(report, ac.IndexReport) and report.indexed == 12 and report.encoder == "api_pixels"
    assert report.metadata in printed and "2 with a date, 2 with GPS" in report.metadata
    cli, api = Gallery.open(tmp_path / "cli"), Gallery.open(tmp_path / "api")
    assert cli.ids == api.ids
    assert [it.meta for it in cli.items] == [it.meta for it in api.items]
    np.testing.assert_array_equal(np.asarray(cli.image_emb), np.asarray(api.image_emb))
    rome = api.items[api.index_of("Trip 2019/rome")].meta
    assert rome["album"] == "Trip 2019" and rome["taken_time"].startswith("2019-05-03")
    assert abs(rome["latitude"] - 41.9028) < 1e-3 and rome["city"] and "NIKON" in rome["capturedevice"]
    # no metadata, a user
    bare = ac.index(photos, "encoder=api_pixels", out=tmp_path / "bare", metadata=False, user="ann")
    assert bare.metadata == "" and all(it.meta == {"user": "ann"} for it in bare.gallery.items)


def _no_timings(x):
    if isinstance(x, dict):
        return {k: _no_timings(v) for k, v in x.items() if k not in ("wall_s", "stages")}
    if isinstance(x, list):
        return [_no_timings(v) for v in x]
    return x


def test_retriever_answers_what_search_json_prints(photos, tmp_path, capsys):
    from agentcir.cli import main

    gal = tmp_path / "g"
    ac.index(photos, "encoder=api_pixels", out=gal)
    args = ["encoder=api_pixels", "method=image_text_sum", f"run.cache={tmp_path / 'c.sqlite'}"]
    ref = photos / "Trip 2019" / "rome.jpg"
    assert (
        main(["search", "--gallery", str(gal), "--image", str(ref), "--text", "in blue", "-k", "4", "--json", *args])
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    with ac.Retriever(gal, *args) as retriever:
        result = retriever.search(image=ref, text="in blue", k=4)
    got = json.loads(json.dumps(result.to_json(), default=str))
    assert _no_timings(got) == _no_timings(printed)
    assert len(got["hits"]) == 4 and "Trip 2019/rome" not in [h["id"] for h in got["hits"]]
    assert got["hits"][0]["meta"] == printed["hits"][0]["meta"]


def test_retriever_refuses_bad_input(tmp_path):
    with pytest.raises(ac.InputError, match="gallery '.*nowhere' is not a folder"):
        ac.Retriever(tmp_path / "nowhere")
    with pytest.raises(ac.InputError, match="not both"):
        ac.Retriever(tmp_path, "method=xr", recipe=ac.compose())


def test_run_result_is_what_the_run_directory_holds(bench, tmp_path):
    from agentcir.framework.report import read_rankings

    recipe = ac.compose(
        "method=image_text_sum",
        "encoder=api_pixels",
        "dataset=composed",
        f"dataset.root={bench}",
        f"run.root={tmp_path}",
        "run.progress=false",
    )
    result = ac.run(recipe)
    assert isinstance(result, ac.RunResult) and result.dir.parent == tmp_path and result.num_queries == 3
    assert result.rankings == read_rankings(result.dir)
    assert result.metrics == json.loads(result.metrics_file.read_text())["final"]
    assert result.report.is_file() and result.recipe_file.is_file()
    # the run directory's recipe reads back, and runs again into the same directory
    assert ac.load_recipe(result.dir) == result.recipe
    again = ac.run(result.dir)
    assert again.dir == result.dir and again.rankings == result.rankings


def test_load_recipe(tmp_path):
    (tmp_path / "encoder").mkdir()
    (tmp_path / "encoder" / "small.yaml").write_text("name: api_pixels\nbatch_size: 4\n")
    top = tmp_path / "config.yaml"  # the project's name, yet this file is the one composed
    top.write_text(
        "defaults:\n  - encoder: small\n  - method: text_only\n  - dataset: demo\n  - _self_\nrun:\n  show: 1\n"
    )
    r = ac.load_recipe(top, "method.top_k=7")
    assert r["encoder"] == {"name": "api_pixels", "batch_size": 4, "scale": 1.0}
    assert r["method"]["top_k"] == 7 and r["run"]["show"] == 1 and "llm" not in r
    (tmp_path / "mine.yaml").write_text("defaults:\n  - encoder: api_pixels\n  - method: text_only\n  - _self_\n")
    assert ac.load_recipe(tmp_path / "mine.yaml")["encoder"]["name"] == "api_pixels"  # registered: no file needed
    (tmp_path / "other.yaml").write_text("defaults:\n  - encoder: api_nowhere\n  - _self_\n")
    with pytest.raises(ac.InputError) as e:  # the file to add: beside the recipe, never in the package
        ac.load_recipe(tmp_path / "other.yaml")
    assert f"add the file {tmp_path / 'encoder' / 'api_nowhere.yaml'}" in str(e.value)
    with pytest.raises(ac.InputError, match="not found"):
        ac.load_recipe(tmp_path / "none.yaml")
    (tmp_path / "bad.yaml").write_text("- a\n- b\n")
    with pytest.raises(ac.InputError, match="must be a mapping"):
        ac.load_recipe(tmp_path / "bad.yaml")
    (tmp_path / "resolved.yaml").write_text(json.dumps(ac.compose("method=text_only")))
    with pytest.raises(ac.InputError, match="field overrides"):
        ac.load_recipe(tmp_path / "resolved.yaml", "method=xr")


def test_register_and_list():
    assert "api_pixels" in ac.list("encoder") and "api_pixels" in ac.list()["encoder"]
    with pytest.raises(ac.InputError, match="unknown component kind 'encoders'"):
        ac.register("encoders", "x")

    class Other(Encoder):
        @dataclass
        class Config:
            pass

    from agentcir.registry import RegistryError

    with pytest.raises(RegistryError, match="duplicate encoder key 'api_pixels'"):
        ac.register("encoder", "api_pixels")(Other)


def test_readme_python_api_section_runs(photos, bench, examples_dir, monkeypatch):
    """README's "Python API" lines are the API's examples too: they run as written."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API\n", 1)[1].split("\n## ", 1)[0]
    section = "\n".join("" if line.startswith("```") else line for line in section.splitlines())  # the fences
    monkeypatch.chdir(examples_dir)
    test = doctest.DocTestParser().get_doctest(
        section, {"photos": str(photos), "bench": str(bench), "__name__": "readme"}, "README Python API", "README.md", 0
    )
    assert len(test.examples) > 10
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
