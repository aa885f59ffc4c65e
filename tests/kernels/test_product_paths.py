"""The numba backend's two tile-product paths (``loop``: register-tiled numba, ``blas``: the
process's sgemm) each pass the gallery-op tests against the reference; the autotune cache of
:mod:`agentcir.kernels.tune` is written, read back, reset, and a corrupt file is refused and re-tuned."""

from __future__ import annotations

import json
from pathlib import Path
import logging

import numpy as np
import pytest
import test_gallery_ops as ops

from agentcir import kernels as K

pytest.importorskip("numba")

from agentcir.kernels import tune  # noqa: E402


@pytest.fixture(params=tune.PATHS)
def path(request, monkeypatch):
    monkeypatch.setenv(tune.ENV_PRODUCT, request.param)
    return request.param


def test_every_gallery_op_on_every_path(path, kind):
    """The existing reference comparisons (odd shapes, exclusions, exact ties) with the path forced,
    so both Q <= 4 and Q > 4 run on each path."""
    ops.test_cosine_topk_matches_reference("numba", kind)
    for agg in ("max", "logsumexp", "octopus"):
        ops.test_proxy_scores_topk_matches_reference("numba", kind, agg)
    ops.test_octopus_weights_match_reference("numba", kind)
    ops.test_octopus_topk_matches_reference("numba", kind, True)
    ops.test_exact_ties_keep_the_lower_id("numba", kind)


def test_ldre_on_every_path(path):
    rng = np.random.default_rng(3)
    G, B, P = ops.unit_rows(rng, 301, 37), ops.unit_rows(rng, 6, 37), ops.unit_rows(rng, 6, 4, 37)
    np.testing.assert_allclose(
        K.ldre_top_drops(B, P, G, topk=5, backend="numba"),
        K.ldre_top_drops(B, P, G, topk=5, backend="reference"),
        atol=2e-5,
    )


def test_blas_path_is_used_when_forced(monkeypatch):
    """The forced path is the one that runs (a broken BLAS path must fail the blas run only)."""
    from agentcir.kernels.numba import _blas

    def boom(*a, **kw):
        raise AssertionError("blas path ran")

    monkeypatch.setattr(_blas, "topk", boom)
    X, G = np.eye(6, 8, dtype=np.float32), np.eye(9, 8, dtype=np.float32)
    monkeypatch.setenv(tune.ENV_PRODUCT, "loop")
    assert K.cosine_topk(X, G, 2, backend="numba").ids[:, 0].tolist() == list(range(6))
    monkeypatch.setenv(tune.ENV_PRODUCT, "blas")
    with pytest.raises(AssertionError, match="blas path ran"):
        K.cosine_topk(X, G, 2, backend="numba")
    monkeypatch.setenv(tune.ENV_PRODUCT, "fast")
    with pytest.raises(K.KernelInputError, match="AGENTCIR_KERNELS_PRODUCT.*loop, blas"):
        K.cosine_topk(X, G, 2, backend="numba")


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    f = tmp_path / "tune.json"
    monkeypatch.setenv(tune.ENV_FILE, str(f))
    monkeypatch.setenv(tune.ENV_AUTOTUNE, "1")
    monkeypatch.delenv(tune.ENV_PRODUCT, raising=False)
    monkeypatch.setattr(tune, "_memo", None)
    yield f
    tune._memo = None


def test_fallback_without_autotune(monkeypatch):
    monkeypatch.setenv(tune.ENV_AUTOTUNE, "0")
    monkeypatch.setattr(tune, "_measure", lambda kind, rows: pytest.fail("measured with autotune off"))
    assert [tune.choose("float32", r) for r in (1, 4, 5, 64, 1024, 1025, 5000)] == ["loop"] * 5 + ["blas"] * 2


def test_a_class_is_measured_inside_it_at_its_geometric_middle(monkeypatch):
    """Not at its largest member (where the BLAS path is at its best within the class), and over a
    gallery large enough that the product, not the per-chunk set-up, is timed."""
    from agentcir.kernels.numba import _blas

    rows = {label: tune.class_rows(label) for _, label in tune.CLASSES}
    assert rows == {"r1": 1, "r2-4": 3, "r5-16": 9, "r17-64": 33, "r65-256": 129, "r257-1024": 513, "r1025+": 2048}
    assert all(tune.shape_class(r) == label for label, r in rows.items())
    with pytest.raises(KeyError):
        tune.class_rows("r7")
    assert [len(_blas._synthetic("float32", r)[1].data) for r in (3, 33, 513, 2048)] == [65536, 17755, 16384, 16384]


def test_tune_cache_written_read_back_and_reset(cache_file, monkeypatch):
    """A real (shrunken) measurement: both paths timed, the faster one kept in the file."""
    from agentcir.kernels.numba import _blas

    monkeypatch.setattr(_blas, "MEASURE_SCAN_ROWS", 2048)
    monkeypatch.setattr(_blas, "MEASURE_FLOPS", 2e6)
    monkeypatch.setattr(_blas, "MEASURE_ROUNDS", 1)
    got = tune.choose("float32", 64)
    data = json.loads(cache_file.read_text())
    entry = data["choices"]["float32/r17-64"]
    ms = entry["ms"]
    assert entry["path"] == got == ("blas" if ms["blas"] * tune.BLAS_MARGIN < ms["loop"] else "loop")
    assert set(entry["ms"]) == {"loop", "blas"} and all(v > 0 for v in entry["ms"].values())
    assert data["machine"] == tune.machine_identity()
    # read back by a fresh process view, without measuring again
    tune._memo = None
    monkeypatch.setattr(tune, "_measure", lambda kind, rows: pytest.fail("measured although cached"))
    assert tune.choose("float32", 40) == got
    assert "float32/r17-64" in tune.show()
    # another machine identity: re-tuned
    data["machine"]["cpu"] = "another CPU"
    cache_file.write_text(json.dumps(data))
    tune._memo = None
    monkeypatch.setattr(tune, "_measure", lambda kind, rows: {"loop": 2.0, "blas": 1.0})
    assert tune.choose("float32", 40) == "blas"
    monkeypatch.setattr(tune, "_measure", lambda kind, rows: {"loop": 1.05, "blas": 1.0})  # a near tie: loop
    assert tune.choose("float32", 300) == "loop"
    assert tune.read_cache()["machine"] == tune.machine_identity()
    assert tune.reset() == cache_file and not cache_file.exists()
    assert "no choices yet" in tune.show()


def test_an_edited_kernel_re_tunes(cache_file, monkeypatch, tmp_path):
    """The identity holds a digest of the numba backend's sources: an edit to any kernel file
    changes it, and a cache written for other sources is measured again."""
    import shutil

    src = Path(tune.__file__).parent / "numba"
    copy = shutil.copytree(src, tmp_path / "numba", ignore=shutil.ignore_patterns("__pycache__"))
    assert tune.kernel_sources_digest(copy) == tune.kernel_sources_digest()
    with open(copy / "_gemm.py", "a") as f:
        f.write("\n# edited\n")
    assert tune.kernel_sources_digest(copy) != tune.kernel_sources_digest()
    monkeypatch.setattr(tune, "_measure", lambda kind, rows: {"loop": 2.0, "blas": 1.0})
    assert tune.choose("float32", 300) == "blas"
    data = json.loads(cache_file.read_text())
    assert data["machine"]["kernels"] == tune.kernel_sources_digest()
    data["machine"]["kernels"] = tune.kernel_sources_digest(copy)
    cache_file.write_text(json.dumps(data))
    tune._memo = None
    monkeypatch.setattr(tune, "_measure", lambda kind, rows: {"loop": 1.0, "blas": 2.0})
    assert tune.choose("float32", 300) == "loop"


@pytest.mark.parametrize(
    "content",
    ["{not json", json.dumps({"format": 1, "machine": {}, "choices": {"x": {"path": "gpu"}}}), json.dumps([1, 2])],
)
def test_corrupt_tune_cache_is_refused_and_retuned(cache_file, monkeypatch, caplog, content):
    cache_file.write_text(content)
    with pytest.raises(tune.TuneCacheError, match=str(cache_file)):
        tune.read_cache()
    assert "refused" in tune.show()
    monkeypatch.setattr(tune, "_measure", lambda kind, rows: {"loop": 1.0, "blas": 3.0})
    with caplog.at_level(logging.WARNING, logger="agentcir.kernels.tune"):
        assert tune.choose("bfloat16", 200) == "loop"
    assert any("refused" in r.getMessage() and str(cache_file) in r.getMessage() for r in caplog.records)
    assert tune.read_cache()["choices"]["float32/r65-256"]["path"] == "loop"


def test_other_dtypes_follow_float32s_loop(cache_file, monkeypatch, capsys):
    """A half or int8 gallery runs float32's product after widening: in a class where float32 takes the
    loop, they take it unmeasured (a near tie cannot split the paths); where float32 takes BLAS they are
    measured and keep BLAS unless the loop is faster, without the margin."""
    from agentcir.cli import main

    times = {  # r17-64: float32 a near tie (loop); r257-1024: float32 clearly on BLAS
        ("float32", 33): {"loop": 1.05, "blas": 1.0},
        ("float32", 513): {"loop": 2.0, "blas": 1.0},
        ("float16", 513): {"loop": 1.0, "blas": 0.97},
        ("bfloat16", 513): {"loop": 0.9, "blas": 1.0},
        ("int8", 513): {"loop": 1.0, "blas": 0.5},
    }
    measured: list = []

    def measure(kind, rows):
        measured.append((kind, rows))
        return times.get((kind, rows), {"loop": 1.0, "blas": 0.1})  # any other: BLAS far ahead

    monkeypatch.setattr(tune, "_measure", measure)
    assert [tune.choose(k, 40) for k in ("float16", "bfloat16", "int8")] == ["loop"] * 3
    assert measured == [("float32", 33)]  # only float32, once
    assert tune.choose("float16", 600) == "blas" and tune.choose("bfloat16", 600) == "loop"
    assert tune.choose("int8", 600) == "blas"
    assert measured[1:] == [("float32", 513), ("float16", 513), ("bfloat16", 513), ("int8", 513)]
    # a stale half entry of a loop class (measured before float32 was) is shown as what choose() does
    data = json.loads(cache_file.read_text())
    data["choices"]["float16/r17-64"] = {"path": "blas", "ms": {"loop": 2.0, "blas": 1.0}, "at": "then"}
    cache_file.write_text(json.dumps(data))
    tune._memo = None
    assert tune.choose("float16", 40) == "loop"
    assert any(
        ln.startswith("float16/r17-64") and "loop" in ln and "follows float32" in ln for ln in tune.show().splitlines()
    )
    # --run --dtype float16 measures float16 only where float32 takes BLAS
    assert tune.reset() == cache_file
    measured.clear()
    assert main(["kernels", "tune", "--run", "--dtype", "float16"]) == 0
    blas_classes = {tune.class_rows(lb) for _, lb in tune.CLASSES} - {33}  # the default: BLAS far ahead
    assert {r for k, r in measured if k == "float32"} == {tune.class_rows(lb) for _, lb in tune.CLASSES}
    assert {r for k, r in measured if k == "float16"} == blas_classes
    capsys.readouterr()


def test_timing_failure_uses_the_fixed_table(cache_file, monkeypatch):
    def fail(kind, rows):
        raise MemoryError("no room for the synthetic gallery")

    monkeypatch.setattr(tune, "_measure", fail)
    assert tune.choose("float16", 1) == "loop" and tune.choose("float16", 300) == "loop"
    assert tune.choose("float16", 2000) == "blas"
    assert not cache_file.exists()


def test_cli_shows_and_resets_the_tune_cache(cache_file, monkeypatch, capsys):
    from agentcir.cli import main

    monkeypatch.setattr(tune, "_measure", lambda kind, rows: {"loop": 1.0, "blas": 0.5})
    assert tune.choose("float32", 64) == "blas"
    assert main(["kernels", "tune"]) == 0
    out = capsys.readouterr().out
    assert str(cache_file) in out and "float32/r17-64" in out and "blas" in out
    assert main(["kernels", "tune", "--reset"]) == 0
    assert "removed" in capsys.readouterr().out and not cache_file.exists()
    cache_file.write_text("[]")
    assert main(["kernels", "tune", "--show"]) == 0
    assert "refused" in capsys.readouterr().out
