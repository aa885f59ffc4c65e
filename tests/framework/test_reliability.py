"""Runs you can trust (issue 13): locks on run directories and gallery builds, full disks and
read-only folders, failed runs leave no empty directory, atomic unique temporary files."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework.files import StorageError, atomic_path, storage_error, unique_tmp
from agentcir.framework.locks import LockedError, hold_lock
from agentcir.framework.recipe import compose
from agentcir.framework.runner import resolve_run_dir, run_lock_file, run_recipe
from tests.full_disk import fill, mount_tmpfs, umount


def toy_recipe(root, *extra, cache=None):
    return compose(
        [
            "method=llm_then_rank",
            "encoder=toy",
            "llm=counting",
            f"run.root={root}",
            f"run.cache={cache or Path(root).parent / 'cache.sqlite'}",
            "run.progress=false",
            *extra,
        ]
    )


# -- locks -----------------------------------------------------------------------------------
def test_second_process_on_a_run_directory_is_told_who_holds_it(plugin_path, tmp_path):
    r = toy_recipe(tmp_path / "runs")
    run_dir = resolve_run_dir(r)
    with hold_lock(run_lock_file(r, run_dir), "test holder"):
        with pytest.raises(LockedError) as e:
            run_recipe(r)
    msg = str(e.value)
    assert f"run directory '{run_dir}' is in use by pid {os.getpid()} on host {socket.gethostname()} since 20" in msg
    assert "agentcir run --wait" in msg
    assert not run_dir.exists()  # the refused run wrote nothing
    assert run_recipe(r).metrics["final"]  # released: the run goes ahead


def test_wait_blocks_until_the_holder_is_done(plugin_path, tmp_path):
    r = toy_recipe(tmp_path / "runs")
    held, release = threading.Event(), threading.Event()

    def holder():
        with hold_lock(run_lock_file(r, resolve_run_dir(r)), "holder"):
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    threading.Timer(0.8, release.set).start()
    t0 = time.perf_counter()
    res = run_recipe(r, wait=True)
    assert time.perf_counter() - t0 >= 0.7 and res.metrics["final"]
    t.join()


def test_a_holder_that_has_not_written_its_record_yet_is_still_named(tmp_path):
    """The refused process reads the holder's record again for a moment: a holder that took the
    lock an instant before writing its pid is named (a loaded machine widened that gap in CI)."""
    import fcntl

    lock = tmp_path / "run.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held, no record yet
        record = json.dumps({"pid": 4242, "host": "node-7", "since": time.time()}).encode()
        threading.Timer(0.05, os.pwrite, (fd, record, 0)).start()
        with pytest.raises(LockedError, match="in use by pid 4242 on host node-7"):
            with hold_lock(lock, "run directory 'x'"):
                pass
        os.ftruncate(fd, 0)  # a holder that never writes one
        with pytest.raises(LockedError, match=r"in use by another process \(its pid is not recorded yet\)"):
            with hold_lock(lock, "run directory 'x'"):
                pass
    finally:
        os.close(fd)


def test_two_processes_on_one_run_directory(plugin_env, tmp_path):
    """Two `agentcir run` at once on the same recipe: one runs, the other exits 2 with the holder's
    name (no traceback); with --wait both finish with the same metrics."""
    cmd = [
        sys.executable,
        "-m",
        "agentcir.cli",
        "run",
        "method=llm_then_rank",
        "encoder=toy",
        "llm=counting",
        "llm.delay=0.02",
        f"llm.counter={tmp_path / 'calls.txt'}",
        f"run.root={tmp_path / 'runs'}",
        f"run.cache={tmp_path / 'c.sqlite'}",
        "run.progress=false",
    ]
    procs = [
        subprocess.Popen(cmd, env=plugin_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    err = next(o[1] for p, o in zip(procs, outs) if p.returncode == 2)
    assert "is in use by pid" in err and "Traceback" not in err
    procs = [
        subprocess.Popen(
            cmd + ["run.fresh=true"] * (i == 0) + ["--wait"],
            env=plugin_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len({o[0].split("metrics (")[1] for o in outs}) == 1


def test_gallery_builds_of_two_threads_do_not_race(plugin_path, tmp_path, image_folder):
    from agentcir.framework.gallery import Gallery, items_from_folder
    from agentcir.registry import ENCODERS

    items, _ = items_from_folder(image_folder)
    enc = ENCODERS.build("toy", {})
    out: list = []
    threads = [
        threading.Thread(target=lambda: out.append(Gallery.build(tmp_path / "g", items, enc, progress=False)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 2 and [len(g) for g in out] == [len(out[0])] * 2
    assert np.array_equal(out[0].image_emb, out[1].image_emb)
    assert not list((tmp_path / "g").glob("*.tmp*"))


def test_temporary_files_are_unique_and_renamed_atomically(tmp_path):
    dest = tmp_path / "x.npz"
    a, b = unique_tmp(dest), unique_tmp(dest)
    assert a != b and a.suffix == ".npz" and a.parent == tmp_path
    dest.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(dest) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert dest.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["x.npz"]


# -- full disk, read-only --------------------------------------------------------------------
def test_full_disk_is_a_clear_error_and_a_rerun_resumes(plugin_path, tmp_path, monkeypatch):
    """A run root on a full file system (a real 1 MB tmpfs when this process may mount one, else
    writes that fail with ENOSPC): a StorageError naming the path and what to do; after space is
    freed the same command finishes with the metrics of a run that had room."""
    ref = run_recipe(toy_recipe(tmp_path / "ref", cache=tmp_path / "ref.sqlite"))
    root = tmp_path / "small"
    mounted, _ = mount_tmpfs(root, "1m")
    try:
        r = toy_recipe(root / "runs", cache=tmp_path / "c.sqlite")
        filler = root / "filler"
        if mounted:
            fill(filler, 8192)  # the disk full but for 8 KB
        else:
            real = os.replace

            def full(src, dst):
                if "stages" in str(dst):
                    raise OSError(errno.ENOSPC, "No space left on device", str(src))
                return real(src, dst)

            monkeypatch.setattr(os, "replace", full)
        with pytest.raises(StorageError) as e:
            run_recipe(r)
        assert "no space left on the device" in str(e.value) and str(root) in str(e.value)
        assert "rerun the same command" in str(e.value)
        if mounted:
            filler.unlink()
        else:
            monkeypatch.setattr(os, "replace", real)
        res = run_recipe(r)
        assert res.metrics["final"] == ref.metrics["final"] and res.metrics["stages"] == ref.metrics["stages"]
    finally:
        if mounted:
            umount(root)


def test_read_only_run_root_and_cache(plugin_path, tmp_path):
    root = tmp_path / "ro"
    if mount_tmpfs(root, "1m", "ro")[0]:
        try:
            with pytest.raises(
                StorageError,
                match=rf"cannot write .*'{root}.*': the file system is read-only; choose a writable folder",
            ):
                run_recipe(toy_recipe(root / "runs", cache=tmp_path / "c.sqlite"))
            # a cache in a read-only folder is used read-only (issue 31): calls are made, not stored
            assert run_recipe(toy_recipe(tmp_path / "runs", cache=root / "c.sqlite")).metrics["final"]
            assert not (root / "c.sqlite").exists()
        finally:
            umount(root)
    err = storage_error(OSError(errno.EROFS, "Read-only file system", "/x/y"), "/x", "the run directory")
    assert str(err).startswith("cannot write the run directory '/x/y': the file system is read-only")
    import sqlite3

    err = storage_error(sqlite3.OperationalError("attempt to write a readonly database"), "/c.sqlite", "the call cache")
    assert "cannot write the call cache '/c.sqlite'" in str(err)
    assert storage_error(OSError(errno.ENOENT, "missing"), "/x", "it") is None


# -- failed runs -----------------------------------------------------------------------------
def test_a_run_that_fails_before_computing_anything_leaves_no_directory(plugin_path, tmp_path):
    """A run that fails before any stage finished removes its directory."""
    from agentcir.framework.errors import InputError

    r = compose(
        [
            "method=text_only",
            "encoder=toy",
            "dataset=composed",
            f"dataset.root={tmp_path / 'nope'}",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'c.sqlite'}",
            "run.progress=false",
        ]
    )
    with pytest.raises(InputError, match="has no gallery.csv"):
        run_recipe(r)
    runs = tmp_path / "runs"
    assert not runs.exists() or [p.name for p in runs.iterdir() if not p.name.startswith(".")] == []


# -- calls in flight -------------------------------------------------------------------------
def test_model_calls_in_flight_never_exceed_run_concurrency():
    """A kill loses (and a resumed run repeats) only the calls in flight, so they are
    bounded by run.concurrency even when a stage gathers several calls per query (XR's fine stage)."""
    import asyncio

    from agentcir.framework.cache import CallCache
    from agentcir.framework.runner import RunContext
    from agentcir.framework.state import RunState
    from agentcir.framework.types import Query

    class Slow:
        kind, registry_key, identity = "llm", "slow", "slow-1"
        now = peak = 0

        async def arun(self, x):
            Slow.now += 1
            Slow.peak = max(Slow.peak, Slow.now)
            await asyncio.sleep(0.01)
            Slow.now -= 1
            return x

    comp = Slow()
    ctx = RunContext(cache=CallCache(), run_dir=None, concurrency=3, progress=False)
    ctx.stage = "s"
    state = RunState(queries=[Query(id=f"q{i}", text=str(i)) for i in range(6)], gallery=None)

    async def fn(q):
        await asyncio.gather(*(ctx.call(comp, "run", x=f"{q.id}-{j}") for j in range(5)))
        return {}

    asyncio.run(ctx.map(state, fn))
    assert Slow.peak == 3 and ctx.stats["s"].calls == 30
