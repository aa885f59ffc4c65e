"""The numba backend's two tile-product paths (``loop``: register-tiled numba, ``blas``: the
process's sgemm) and the GPU backend's two (``loop``: the Triton kernels, ``blas``: cuBLAS tiles through
the torch ops) each pass the gallery-op tests against the reference; the autotune cache of
:mod:`agentcir.kernels.tune` is written, read back, reset, and a corrupt file is refused and re-tuned."""

from __future__ import annotations

import json
from pathlib import Path
import logging

import numpy as np
import pytest
import test_gallery_ops as ops

from agentcir import kernels as K
from agentcir.kernels import _tiling
from agentcir.kernels.dispatch import why_unavailable

pytest.importorskip("numba")

from agentcir.kernels import tune  # noqa: E402


@pytest.fixture(params=tune.PATHS)
def path(request, monkeypatch):
    monkeypatch.setenv(tune.ENV_PRODUCT, request.param)
    return request.param


@pytest.fixture(params=(*tune.PATHS, "blas-numpy"))
def numba_path(request, monkeypatch):
    """Each numba product path forced; ``blas-numpy``: ``blas`` where numba threads cannot call the BLAS
    (numpy's product on whole tiles, :mod:`agentcir.kernels.numba._blas`)."""
    from agentcir.kernels.numba import _sgemm

    monkeypatch.setenv(tune.ENV_PRODUCT, request.param.split("-")[0])
    if request.param == "blas-numpy":
        monkeypatch.setattr(_sgemm, "find", lambda: None)
    elif request.param == "blas" and _sgemm.find() is None:
        pytest.skip("numpy's BLAS has no cblas_sgemm that numba threads can call here")
    return request.param


def test_every_gallery_op_on_every_path(numba_path, kind):
    """The existing reference comparisons (odd shapes, exclusions, exact ties) with the path forced,
    so both Q <= 4 and Q > 4 run on each path."""
    ops.test_cosine_topk_matches_reference("numba", kind)
    for agg in ("max", "logsumexp", "octopus"):
        ops.test_proxy_scores_topk_matches_reference("numba", kind, agg)
    ops.test_octopus_weights_match_reference("numba", kind)
    ops.test_octopus_topk_matches_reference("numba", kind, True)
    ops.test_exact_ties_keep_the_lower_id("numba", kind)


def test_ldre_on_every_path(numba_path):
    rng = np.random.default_rng(3)
    G, B, P = ops.unit_rows(rng, 301, 37), ops.unit_rows(rng, 6, 37), ops.unit_rows(rng, 6, 4, 37)
    np.testing.assert_allclose(
        K.ldre_top_drops(B, P, G, topk=5, backend="numba"),
        K.ldre_top_drops(B, P, G, topk=5, backend="reference"),
        atol=2e-5,
    )


def test_blas_path_is_used_when_forced(monkeypatch):
    """The forced path is the one that runs (a broken BLAS path must fail the blas run only)."""
    from agentcir.kernels.numba import cosine

    def boom(*a, **kw):
        raise AssertionError("blas path ran")

    monkeypatch.setattr(cosine, "blas_topk", boom)
    X, G = np.eye(6, 8, dtype=np.float32), np.eye(9, 8, dtype=np.float32)
    monkeypatch.setenv(tune.ENV_PRODUCT, "loop")
    assert K.cosine_topk(X, G, 2, backend="numba").ids[:, 0].tolist() == list(range(6))
    monkeypatch.setenv(tune.ENV_PRODUCT, "blas")
    with pytest.raises(AssertionError, match="blas path ran"):
        K.cosine_topk(X, G, 2, backend="numba")
    monkeypatch.setenv(tune.ENV_PRODUCT, "fast")
    with pytest.raises(K.KernelInputError, match="AGENTCIR_KERNELS_PRODUCT.*loop, blas"):
        K.cosine_topk(X, G, 2, backend="numba")


def test_path_forced_in_process_and_restored(monkeypatch):
    monkeypatch.setenv(tune.ENV_PRODUCT, "blas")
    with tune.path_forced("loop"):
        assert tune.forced() == "loop" and tune.choose("float32", 64) == "loop"
        with tune.path_forced("blas"):
            assert tune.forced() == "blas"
        assert tune.forced() == "loop"
    assert tune.PATH_OVERRIDE is None and tune.forced() == "blas"
    with pytest.raises(ValueError, match="unknown product path 'fast'"):
        with tune.path_forced("fast"):
            pass


needs_triton = pytest.mark.skipif(why_unavailable("triton") is not None, reason="triton cannot run here")


@needs_triton
def test_every_gpu_gallery_op_on_every_path(path, kind):
    """The GPU backend's Triton kernels (``loop``) and cuBLAS tiles (``blas``) against the reference
    (under the interpreter: half galleries in the cosine test only, as in test_gallery_ops)."""
    ops.test_cosine_topk_matches_reference("triton", kind)
    if kind != "float32" and ops.INTERPRETED:
        return
    for agg in ("max", "logsumexp", "octopus"):
        ops.test_proxy_scores_topk_matches_reference("triton", kind, agg)
    ops.test_octopus_weights_match_reference("triton", kind)
    ops.test_octopus_topk_matches_reference("triton", kind, True)
    ops.test_exact_ties_keep_the_lower_id("triton", kind)


@needs_triton
def test_gpu_blas_path_launches_no_triton_kernel(monkeypatch):
    """``blas`` (the default) runs the torch ops on the device; ``loop`` the Triton kernels, as forced."""
    from agentcir.kernels.triton import _common, cosine, octopus, weights

    class Boom:
        def __getitem__(self, grid):
            raise AssertionError("a Triton kernel was launched")

    for module, name in ((cosine, "_cosine_kernel"), (octopus, "_octopus_kernel"), (weights, "_gap_kernel")):
        monkeypatch.setattr(module, name, Boom())
    rng = np.random.default_rng(5)
    G, X, P = ops.unit_rows(rng, 40, 8), ops.unit_rows(rng, 3, 8), ops.unit_rows(rng, 3, 4, 8)
    assert _common.product() == "blas" and _common.product(10**6) == "blas"
    ref = K.octopus_topk(X, P, X, G, 5, backend="reference")
    got = K.octopus_topk(X, P, X, G, 5, backend="triton")
    np.testing.assert_array_equal(np.asarray(got.ids), ref.ids)
    monkeypatch.setenv(tune.ENV_PRODUCT, "loop")
    assert _common.product(256) == "loop" and _common.product(257) == "blas"  # beyond a tile's top-k: blas
    with pytest.raises(AssertionError, match="Triton kernel was launched"):
        K.cosine_topk(X, G, 5, backend="triton")


def test_gpu_tiles_are_few_and_bounded(monkeypatch):
    """On a CUDA device a tile holds up to 64 MiB of scores and 512 MiB of widened gallery rows, no row cap;
    on a CPU the cache-sized tiles are unchanged."""
    monkeypatch.setattr(_tiling, "TILE_OVERRIDE", None)
    assert _tiling.tile_rows(64, 512, 10**6, gpu=True) == 2**18  # the gallery budget: 512 MiB / 2 KiB
    assert _tiling.tile_rows(1, 512, 10**5, gpu=True) == 10**5  # the whole gallery in one product
    assert _tiling.tile_rows(640, 512, 10**6, gpu=True) == 26112  # the score budget: 64 MiB / (4 * 640)
    assert _tiling.tile_rows(10**6, 512, 10**6, gpu=True) == _tiling.MIN_TILE
    assert _tiling.tile_rows(64, 512, 10**6) == 8192 and _tiling.tile_rows(640, 512, 10**6) == 3072
    for rows, N in ((1, 10**7), (64, 10**6), (640, 10**6), (5000, 10**5)):
        t = _tiling.tile_rows(rows, 512, N, gpu=True)
        assert t % _tiling.MIN_TILE == 0 or t == N
        assert t == _tiling.MIN_TILE or (
            4 * rows * t <= _tiling.GPU_SCORE_TILE_BYTES and 4 * 512 * t <= _tiling.GPU_GALLERY_TILE_BYTES
        )
    torch = pytest.importorskip("torch")
    from agentcir.kernels.torch._common import device_tile_rows

    assert device_tile_rows(64, 512, 10**6, torch.device("cuda")) == 2**18
    assert device_tile_rows(64, 512, 10**6, torch.device("cpu")) == 8192


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
    from agentcir.kernels.numba import _measure

    rows = {label: tune.class_rows(label) for _, label in tune.CLASSES}
    assert rows == {"r1": 1, "r2-4": 3, "r5-16": 9, "r17-64": 33, "r65-256": 129, "r257-1024": 513, "r1025+": 2048}
    assert all(tune.shape_class(r) == label for label, r in rows.items())
    with pytest.raises(KeyError):
        tune.class_rows("r7")
    assert [len(_measure._synthetic("float32", r)[1].data) for r in (3, 33, 513, 2048)] == [65536, 17755, 16384, 16384]


def test_tune_cache_written_read_back_and_reset(cache_file, monkeypatch):
    """A real (shrunken) measurement: both paths timed, the faster one kept in the file."""
    from agentcir.kernels.numba import _measure

    monkeypatch.setattr(_measure, "MEASURE_SCAN_ROWS", 2048)
    monkeypatch.setattr(_measure, "MEASURE_FLOPS", 2e6)
    monkeypatch.setattr(_measure, "MEASURE_ROUNDS", 1)
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


def test_a_choice_is_measured_for_the_thread_count_in_effect(cache_file, monkeypatch):
    """The loop path runs on the caller's numba threads, the BLAS on its own pool: a choice measured on
    fewer threads (a scale worker's share) is kept apart from the whole machine's, each measured once."""
    import numba

    full = numba.config.NUMBA_NUM_THREADS
    if full < 2:
        pytest.skip("one numba thread: no smaller share to measure")
    measured = []

    def measure(kind, rows):
        measured.append(numba.get_num_threads())
        return {"loop": 2.0, "blas": 1.0} if numba.get_num_threads() == 1 else {"loop": 1.0, "blas": 2.0}

    monkeypatch.setattr(tune, "_measure", measure)
    assert tune.choose("float32", 40) == "loop" and tune.choice_key("float32", 40) == "float32/r17-64"
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        assert tune.choice_key("float32", 40) == "float32/r17-64@1"
        assert tune.choose("float32", 40) == "blas"
        assert tune.choose("float32", 50) == "blas"
    finally:
        numba.set_num_threads(old)
    assert tune.choose("float32", 60) == "loop"
    assert measured == [full, 1]
    choices = json.loads(cache_file.read_text())["choices"]
    assert {k: e["path"] for k, e in choices.items()} == {"float32/r17-64": "loop", "float32/r17-64@1": "blas"}
    assert "float32/r17-64@1" in tune.show() and "@n: measured while numba ran on n threads" in tune.show()


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
