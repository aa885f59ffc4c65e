"""Videos as keyframes: N uniformly sampled frames, from a folder of pre-extracted frames or
decoded from a video file with PyAV (extra ``video``), written once as JPEG files.

Sampling follows CoVR (``src/data/utils.py``): one frame = the middle frame
(``num_frames // 2``); N > 1 frames = the middle of N equal segments, repeated
cyclically when the video has fewer than N frames.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
import numpy as np

from ..errors import InputError, require
from ..hashing import stable_hash
from ..images import IMAGE_SUFFIXES

log = logging.getLogger(__name__)

VIDEO_SUFFIXES = (".mp4", ".webm", ".mkv", ".avi", ".mov", ".m4v", ".mpg", ".mpeg")


def sample_indices(num_frames: int, n: int) -> list[int]:
    """Indices of ``n`` uniformly sampled frames of a ``num_frames``-frame video."""
    if num_frames <= 0:
        raise InputError(f"cannot sample keyframes from a video with {num_frames} frames")
    if n < 1:
        raise InputError(f"number of keyframes must be at least 1, got {n}")
    if n == 1:
        return [num_frames // 2]
    acc = min(n, num_frames)
    edges = np.linspace(0, num_frames, acc + 1).astype(int)
    idx = [int((edges[i] + edges[i + 1] - 1) // 2) for i in range(acc)]
    return (idx * n)[:n] if len(idx) < n else idx


def find_video(video_id: str, frames_dir: Path | None, videos_dir: Path | None) -> Path | None:
    """Where ``video_id`` lives: a frames folder ``frames_dir/<id>/`` first, else a video file
    ``videos_dir/<id>.<suffix>``; ``None`` when neither exists."""
    if frames_dir is not None:
        d = frames_dir / video_id
        if d.is_dir():
            return d
    if videos_dir is not None:
        for suf in VIDEO_SUFFIXES:
            p = videos_dir / f"{video_id}{suf}"
            if p.is_file():
                return p
    return None


def frame_files(folder: Path) -> list[Path]:
    """The image files of a pre-extracted frames folder, in name order."""
    return sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")
    )


def keyframes(source: str | os.PathLike, n: int, cache_dir: str | os.PathLike) -> list[str]:
    """Paths of ``n`` keyframes of ``source`` (a frames folder or a video file).

    A video is decoded once: its frames are written under ``cache_dir`` and reused.
    Raises :class:`InputError` for a missing source or an empty frames folder, and
    :class:`~agentcir.framework.errors.MissingExtraError` when a video must be decoded
    and PyAV is not installed.
    """
    src = Path(source)
    if src.is_dir():
        files = frame_files(src)
        if not files:
            raise InputError(f"keyframes folder '{src}' holds no image files")
        return [str(files[i].resolve()) for i in sample_indices(len(files), n)]
    if not src.is_file():
        raise InputError(f"video '{src}' not found")
    if src.suffix.lower() not in VIDEO_SUFFIXES:
        raise InputError(f"'{src}' is neither a frames folder nor a video file ({', '.join(VIDEO_SUFFIXES)})")
    st = src.stat()
    out = Path(cache_dir) / stable_hash(str(src.resolve()), st.st_size, st.st_mtime_ns, n, n=20)
    done = out / "frames.json"
    if done.is_file():
        paths = json.loads(done.read_text())
        if all(Path(p).is_file() for p in paths):
            return paths
    paths = _decode(src, n, out)
    done.write_text(json.dumps(paths))
    return paths


def _decode(src: Path, n: int, out: Path) -> list[str]:
    av = require(
        "av",
        "video",
        feature=f"decoding video '{src}' into keyframes (or give a folder of pre-extracted frames instead)",
    )
    out.mkdir(parents=True, exist_ok=True)
    try:
        with av.open(str(src)) as c:
            if not c.streams.video:
                raise InputError(f"video '{src}' has no video stream")
            total = c.streams.video[0].frames
        if not total:  # container does not say: count by decoding
            with av.open(str(src)) as c:
                total = sum(1 for _ in c.decode(video=0))
        want = sample_indices(total, n)
        wanted = set(want)
        saved: dict[int, str] = {}
        with av.open(str(src)) as c:
            for i, frame in enumerate(c.decode(video=0)):
                if i in wanted:
                    p = out / f"{i:06d}.jpg"
                    frame.to_image().convert("RGB").save(p, quality=95)
                    saved[i] = str(p.resolve())
                if len(saved) == len(wanted):
                    break
    except InputError:
        raise
    except Exception as e:  # PyAV raises its own error types for broken files
        raise InputError(f"video '{src}': cannot decode ({type(e).__name__}: {e})") from None
    if not saved:
        raise InputError(f"video '{src}': no frame could be decoded")
    # a container that over-reports its frame count: fall back to the last decoded frame
    last = saved[max(saved)]
    return [saved.get(i, last) for i in want]
