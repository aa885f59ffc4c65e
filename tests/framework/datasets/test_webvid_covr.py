"""WebVid-CoVR on a fixture in the official CSV format; keyframe sampling; PyAV decoding."""

import csv

import numpy as np
import pytest

from agentcir.framework.datasets.video import find_video, keyframes, sample_indices
from agentcir.framework.datasets.webvid_covr import WebVidCoVR
from agentcir.framework.errors import InputError, MissingExtraError

ROWS = [  # txt1, txt2, sim_txt, pth1, pth2, edit, scores
    ("a dog on grass", "a cat on grass", 0.8, "001/10", "002/20", "make it a cat", "[0.1, 0.2]"),
    ("a red car", "a blue car", 0.9, "001/11", "002/21", "Turn the car blue.", "[]"),
    ("a man running", "a man walking", 0.7, "002/20", "003/30", "walking instead", "[0.3]"),
    ("sunset", "sunrise", 0.6, "004/40", "002/22", "as a sunrise", "[]"),  # reference video missing
    ("a boat", "two boats", 0.5, "001/12", "009/99", "add a second boat", "[]"),  # target video missing
]


def write_csv(path, rows=ROWS, header=("txt1", "txt2", "sim_txt", "pth1", "pth2", "edit", "scores")):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


@pytest.fixture
def covr(tmp_path, h):
    """Pre-extracted frame folders (5 frames each) for every video but 004/40 and 009/99."""
    write_csv(tmp_path / "webvid8m-covr_test.csv")
    for vid in ("001/10", "001/11", "001/12", "002/20", "002/21", "002/22", "003/30"):
        h.touch_all(tmp_path / "frames" / vid / f"{i:04d}.jpg" for i in range(5))
    return tmp_path


def test_sample_indices_follow_covr():
    assert sample_indices(10, 1) == [5]  # middle frame
    assert sample_indices(10, 2) == [2, 7]  # middles of [0,5) and [5,10)
    assert sample_indices(100, 4) == [12, 37, 62, 87]
    assert sample_indices(2, 4) == [0, 1, 0, 1]  # fewer frames than asked: repeated
    with pytest.raises(InputError, match="video with 0 frames"):
        sample_indices(0, 3)
    with pytest.raises(InputError, match="at least 1, got 0"):
        sample_indices(5, 0)


def test_keyframes_from_a_frames_folder(covr, tmp_path):
    folder = covr / "frames" / "001" / "10"
    assert [p.rsplit("/", 1)[1] for p in keyframes(folder, 2, tmp_path / "c")] == ["0000.jpg", "0003.jpg"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="keyframes folder .*empty' holds no image files"):
        keyframes(tmp_path / "empty", 1, tmp_path / "c")
    with pytest.raises(InputError, match="video .*nope.mp4' not found"):
        keyframes(tmp_path / "nope.mp4", 1, tmp_path / "c")
    assert find_video("001/10", covr / "frames", covr / "videos") == folder
    assert find_video("004/40", covr / "frames", covr / "videos") is None


def test_loader_gallery_queries_and_skips(covr):
    ds = WebVidCoVR(WebVidCoVR.Config(root=str(covr), num_frames=3))
    items = ds.gallery_items()
    assert [it.id for it in items] == ["002/20", "002/21", "002/22", "003/30"]  # sorted pth2, 009/99 missing
    assert items[0].path.endswith("frames/002/20/0002.jpg")  # the middle keyframe
    queries = ds.queries()
    assert [q.id for q in queries] == ["0", "1", "2"]
    q = queries[0]
    assert q.reference_id == "001/10" and q.targets == ["002/20"] and q.text == "make it a cat"
    assert [p.rsplit("/", 1)[1] for p in q.reference] == ["0000.jpg", "0001.jpg", "0003.jpg"]
    assert q.meta["txt2"] == "a cat on grass" and q.meta["scores"] == "[0.1, 0.2]"
    note = ds.subset_note()
    assert "evaluated 3 of 5 queries (skipped: 1 reference video missing, 1 target video missing)" in note
    assert "gallery 4 of 5 images (1 missing on disk, skipped; e.g. 009/99)" in note


def test_evaluate_masks_the_reference(covr, h):
    ds = WebVidCoVR(WebVidCoVR.Config(root=str(covr)))
    g = h.id_gallery(ds.gallery_items())
    queries = ds.queries()
    # query 2's reference 002/20 is also a gallery video: ranked first, it is masked
    rankings = [["002/21", "002/20", "003/30"], ["002/21", "002/20"], ["002/20", "003/30", "002/21"]]
    m = ds.evaluate(h.candidates_from(rankings, g), queries, g)
    assert m["R@1"] == pytest.approx(200 / 3)  # q1 hit at 1, q2 (masked ref) at 1, q0 at 2
    assert m["R@5"] == 100.0 and m["meanR3"] == pytest.approx((200 / 3 + 200) / 3)
    assert "reference video masked" in ds.subset_note()


def test_bad_csv(tmp_path):
    write_csv(tmp_path / "a.csv", rows=[("x", "y")], header=("txt1", "txt2"))
    with pytest.raises(InputError, match=r"lacks column\(s\) pth1, pth2, edit \(has: txt1, txt2"):
        WebVidCoVR(WebVidCoVR.Config(root=str(tmp_path), annotation="a.csv")).gallery_items()
    with pytest.raises(InputError, match="annotation CSV .*missing.csv' not found"):
        WebVidCoVR(WebVidCoVR.Config(root=str(tmp_path), annotation="missing.csv")).gallery_items()
    with pytest.raises(InputError, match="field 'num_frames' must be at least 1"):
        WebVidCoVR(WebVidCoVR.Config(num_frames=0))


def _write_video(path, n_frames=12):
    av = pytest.importorskip("av", reason="PyAV (extra 'video') not installed")
    with av.open(str(path), "w") as c:
        s = c.add_stream("mpeg4", rate=12)
        s.width, s.height, s.pix_fmt = 32, 32, "yuv420p"
        for i in range(n_frames):
            img = np.full((32, 32, 3), i * 20, np.uint8)  # frame i has grey level 20 i
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def test_decoding_a_real_video_with_pyav(tmp_path):
    from PIL import Image

    _write_video(tmp_path / "clip.mp4")
    paths = keyframes(tmp_path / "clip.mp4", 3, tmp_path / "cache")
    # 12 frames, 3 segments of 4: frames 1, 5, 9 (grey 20, 100, 180)
    levels = [float(np.asarray(Image.open(p)).mean()) for p in paths]
    assert levels == pytest.approx([20, 100, 180], abs=8)
    assert keyframes(tmp_path / "clip.mp4", 3, tmp_path / "cache") == paths  # decoded once, reused
    (tmp_path / "bad.mp4").write_bytes(b"not a video at all")
    with pytest.raises(InputError, match="video .*bad.mp4': cannot decode"):
        keyframes(tmp_path / "bad.mp4", 1, tmp_path / "cache")


def test_video_without_decoder_names_the_extra(tmp_path, monkeypatch):
    import sys

    (tmp_path / "clip.mp4").write_bytes(b"\x00" * 10)
    monkeypatch.setitem(sys.modules, "av", None)  # as if PyAV were not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'agentcir\[video\]'") as e:
        keyframes(tmp_path / "clip.mp4", 1, tmp_path / "cache")
    assert "pre-extracted frames" in str(e.value)


def test_gallery_from_video_files(tmp_path, h):
    pytest.importorskip("av", reason="PyAV (extra 'video') not installed")
    write_csv(tmp_path / "webvid8m-covr_test.csv", rows=[ROWS[0]])
    (tmp_path / "videos" / "001").mkdir(parents=True)
    (tmp_path / "videos" / "002").mkdir(parents=True)
    _write_video(tmp_path / "videos" / "001" / "10.mp4")
    _write_video(tmp_path / "videos" / "002" / "20.mp4", n_frames=8)
    ds = WebVidCoVR(WebVidCoVR.Config(root=str(tmp_path), num_frames=2))
    (item,) = ds.gallery_items()
    assert (
        item.id == "002/20" and item.path.startswith(str(tmp_path / "_keyframes")) and item.path.endswith("000004.jpg")
    )
    (q,) = ds.queries()
    assert len(q.reference) == 2 and all(p.endswith(".jpg") for p in q.reference)
