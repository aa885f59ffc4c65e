"""Watch mode (agentcir.framework.watch, FolderFollower): a photo landing in a watched folder gets
into the gallery; a burst is one update; a partial write waits until it decodes; a deleted photo
leaves; hidden and AppleDouble files are ignored; `agentcir index --watch` stops on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.gallery import Gallery
from agentcir.framework.indexing import FolderFollower, watch_line
from agentcir.framework.watch import FolderWatch, ignored

from .test_library import ROOT, CountingEncoder, folder_of, photo

pytest.importorskip("watchdog")

FAST = dict(debounce_s=0.2, settle_s=0.1, observer="polling", poll_s=0.05, retry_s=0.1)


@pytest.fixture
def followed(tmp_path):
    """A folder of 6 photos indexed into a gallery, and its follower running in a thread."""
    folder = folder_of(tmp_path / "photos", 6)
    enc = CountingEncoder()
    f = FolderFollower({"encoder": {"name": "counting"}}, folder, tmp_path / "g", encoder=enc, metadata=False)
    f.update()
    enc.seen.clear()
    watch = FolderWatch(folder, **FAST).start()
    done: list = []
    th = threading.Thread(target=f.follow, args=(watch,), kwargs={"on_update": lambda *a: done.append(a)}, daemon=True)
    th.start()
    yield folder, tmp_path / "g", enc, done
    watch.stop()
    th.join(5)
    assert not th.is_alive()


def wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_a_new_photo_becomes_searchable(followed):
    folder, out, enc, done = followed
    t0 = time.monotonic()
    photo(folder / "new.png", 99)
    assert wait_for(lambda: done), "no update"
    took = time.monotonic() - t0
    g = Gallery.open(out)
    assert len(g) == 7 and enc.count == 1
    row = g.index_of("new")
    mine = CountingEncoder().encode_images([str(folder / "new.png")], progress=False)[0]
    emb = np.asarray(g.image_emb, np.float32)
    assert int(np.argmax(emb @ mine)) == row  # the new photo is its own nearest neighbour
    batch, report, seconds = done[0]
    assert batch.changed == [str((folder / "new.png").resolve())] and 0 < seconds <= took + 0.5
    assert "1 new" in watch_line(batch, report, seconds)


def test_a_burst_is_one_update(followed):
    folder, out, enc, done = followed
    made = [photo(folder.parent / "staging" / f"b{i:02d}.png", 200 + i) for i in range(12)]
    (folder / "burst").mkdir()
    for p in made:  # 12 photos landing within the 0.2 s debounce
        os.replace(p, folder / "burst" / p.name)
        time.sleep(0.005)
    assert wait_for(lambda: done)
    time.sleep(0.5)
    assert len(done) == 1 and len(done[0][0].changed) == 12 and enc.count == 12
    assert len(Gallery.open(out)) == 18


def test_a_partial_write_is_indexed_only_when_complete(followed):
    folder, out, enc, done = followed
    whole = photo(folder.parent / "elsewhere.png", 77).read_bytes()
    part = folder / "slow.png"
    part.write_bytes(whole[: len(whole) // 2])  # a copy under way: settles, but does not decode
    time.sleep(0.8)
    assert not done and Gallery.open(out).index_of("slow") == -1 and enc.count == 0
    with open(part, "ab") as fh:
        fh.write(whole[len(whole) // 2 :])
    assert wait_for(lambda: done)
    g = Gallery.open(out)
    assert g.index_of("slow") >= 0 and enc.count == 1 and len(g.skipped) == 0


def test_a_deleted_photo_disappears(followed):
    folder, out, enc, done = followed
    (folder / "p002.png").unlink()
    assert wait_for(lambda: done)
    g = Gallery.open(out)
    assert len(g) == 5 and g.index_of("p002") == -1 and enc.count == 0
    assert done[0][0].removed == [str((folder / "p002.png").resolve())]


def test_hidden_and_appledouble_files_are_ignored(followed):
    folder, out, enc, done = followed
    photo(folder / ".hidden.png", 5)
    (folder / "._p001.png").write_bytes(b"\x00\x05\x16\x07AppleDouble resource fork")
    photo(folder / ".thumbnails" / "x.png", 6)
    (folder / "notes.txt").write_text("not a photo")
    time.sleep(0.8)
    assert not done and enc.count == 0
    assert ignored(folder / "._a.jpg", folder) and ignored(folder / ".t" / "a.jpg", folder)
    assert not ignored(folder / "a.JPG", folder) and not ignored(folder / "a.xmp", folder)


def test_the_platform_events_see_a_new_photo(tmp_path):
    folder = folder_of(tmp_path / "photos", 1)
    with FolderWatch(folder, debounce_s=0.1, settle_s=0.05) as w:
        photo(folder / "a" / "new.png", 3)
        b = w.next_batch(timeout=5)
    assert w.kind in ("native", "polling") and b is not None
    assert b.changed == [str((folder / "a" / "new.png").resolve())]


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        FolderWatch(tmp_path / "nope")
    with pytest.raises(InputError, match="observer must be one of"):
        FolderWatch(tmp_path, observer="fast")


#: the CLI started by a launcher that ignores and blocks SIGINT (both are inherited by a child: a job
#: runner, a test worker): the watch must still stop on Ctrl-C
IGNORING_LAUNCHER = (
    "import runpy, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
    "sys.argv[0] = 'agentcir'\n"
    "runpy.run_module('agentcir.cli', run_name='__main__')\n"
)


@pytest.mark.parametrize("launcher", ["plain", "ignoring"])
def test_cli_index_watch_follows_and_stops_on_ctrl_c(plugin_env, tmp_path, launcher):
    folder = folder_of(tmp_path / "photos", 5)
    out = tmp_path / "g"
    env = {
        **plugin_env,
        "PYTHONPATH": os.pathsep.join([str(ROOT), plugin_env.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",  # SIGABRT on a hang prints every thread's stack to stderr
    }
    p = subprocess.Popen(
        [
            sys.executable,
            *(["-m", "agentcir.cli"] if launcher == "plain" else ["-c", IGNORING_LAUNCHER]),
            "index",
            str(folder),
            "--out",
            str(out),
            "encoder=toy",
            "-q",
            "--no-metadata",
            "--watch",
            "--poll",
            "0.05",
            "--debounce",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    errs: list[str] = []  # stderr is drained too: a full pipe would block the child and read as a hang
    threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True).start()
    threading.Thread(target=lambda: errs.extend(iter(p.stderr.readline, "")), daemon=True).start()
    try:
        assert wait_for(lambda: any(ln.startswith("watching") for ln in lines), 60), (lines, p.poll())
        photo(folder / "new.png", 50)
        assert wait_for(lambda: any(ln.startswith("watch:") for ln in lines), 20), lines
        p.send_signal(signal.SIGINT)
        try:
            code = p.wait(60)  # a stop, not a hang: 60 s leaves room for a loaded machine
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGABRT)
            p.wait(10)
            time.sleep(0.2)
            pytest.fail("index --watch did not stop on SIGINT; its threads:\n" + "".join(errs)[-8000:])
        assert code == 0, "".join(errs)
    finally:
        if p.poll() is None:
            p.kill()
    time.sleep(0.1)
    text = "".join(lines)
    assert "1 new" in text and "stopped watching" in text, text
    assert Gallery.open(out).index_of("new") >= 0
