"""The domain check of `agentcir index`: photos far from an encoder's own domain are said to be, measured."""

import numpy as np
from PIL import Image

from agentcir.framework.domain import FAR_FRACTION, REFERENCE_FILE, domain_check


class FakeEncoder:
    """Embeds a reference photo near axis 0 (its domain); knows its domain folder."""

    registry_key = "fake"
    identity = "fake-1"

    def __init__(self, folder):
        self.domain_sample = folder
        self.calls = 0

    def encode_images(self, paths, progress=None):
        self.calls += 1
        rng = np.random.default_rng(len(paths))
        e = np.zeros((len(paths), 16), np.float32)
        e[:, 0] = 1.0
        e += rng.normal(0, 0.15, e.shape).astype(np.float32)
        return e / np.linalg.norm(e, axis=1, keepdims=True)


def _photos(folder, n=20):
    folder.mkdir()
    for i in range(n):
        Image.new("RGB", (4, 4), (i, i, i)).save(folder / f"r{i:02d}.jpg")
    return folder


def test_far_and_close_galleries(tmp_path):
    enc = FakeEncoder(_photos(tmp_path / "domain"))
    rng = np.random.default_rng(1)
    close = enc.encode_images([str(i) for i in range(40)])[:, :] + rng.normal(0, 0.01, (40, 16)).astype(np.float32)
    close /= np.linalg.norm(close, axis=1, keepdims=True)
    far = np.zeros((40, 16), np.float32)
    far[:, 1] = 1.0
    far += rng.normal(0, 0.15, far.shape).astype(np.float32)
    far /= np.linalg.norm(far, axis=1, keepdims=True)
    c, f = domain_check(enc, close), domain_check(enc, far)
    assert not c.far and c.far_fraction <= FAR_FRACTION and "close to its domain" in c.line()
    assert f.far and f.far_fraction == 1.0 and f.median_nn < f.threshold
    assert "far from the domain of encoder 'fake'" in f.line() and "encoder=open_clip" in f.line()


def test_no_domain_no_check(tmp_path):
    enc = FakeEncoder(None)
    assert domain_check(enc, np.eye(8, 16, dtype=np.float32)) is None
    enc = FakeEncoder(_photos(tmp_path / "d"))
    assert domain_check(enc, np.eye(3, 16, dtype=np.float32)) is None  # too few photos to say


class RowsOnly:
    """A large gallery's embeddings (as a sharded gallery's): rows may be read, never the whole array."""

    def __init__(self, emb):
        self.emb, self.read = emb, 0

    def __len__(self):
        return len(self.emb)

    def __getitem__(self, rows):
        out = self.emb[rows]
        self.read += len(out)
        return out

    def __array__(self, dtype=None, copy=None):
        raise AssertionError("the whole gallery was materialised")


def test_a_large_gallery_is_read_only_at_its_sample(tmp_path, monkeypatch):
    import agentcir.framework.domain as domain

    monkeypatch.setattr(domain, "MAX_PHOTOS", 50)
    enc = FakeEncoder(_photos(tmp_path / "domain"))
    far = np.zeros((500, 16), np.float16)
    far[:, 1] = 1.0
    big = RowsOnly(far)
    res = domain_check(enc, big)
    assert res.photos == 50 and big.read == 50 and res.far
    assert domain_check(FakeEncoder(None), RowsOnly(far)) is None  # no domain: nothing read


def test_the_bundled_catalog_encoder_names_its_domain():
    from agentcir.registry import ENCODERS

    enc = ENCODERS.build("catalog", {})  # lazy: no weights are loaded here
    assert enc.domain_sample.name == "images" and enc.domain_sample.parent.name == "demo"


def test_the_reference_embeddings_are_kept_in_the_gallery_folder(tmp_path, caplog):
    """Kept by the first check, read by the next (no embedding); another encoder identity, other
    reference photos or a damaged file embed them again; a folder that cannot take them only warns."""
    enc = FakeEncoder(_photos(tmp_path / "domain"))
    gallery = tmp_path / "g"
    gallery.mkdir()
    emb = enc.encode_images([str(i) for i in range(40)])
    enc.calls = 0
    first = domain_check(enc, emb, folder=gallery)
    assert enc.calls == 1 and (gallery / REFERENCE_FILE).is_file()
    again = domain_check(enc, emb, folder=gallery)
    assert enc.calls == 1 and again == first
    enc.identity = "fake-2"  # another encoder: its own reference embeddings
    domain_check(enc, emb, folder=gallery)
    assert enc.calls == 2
    domain_check(enc, emb, folder=gallery)
    assert enc.calls == 2
    Image.new("RGB", (4, 4), (9, 1, 1)).save(enc.domain_sample / "r00.jpg")  # a reference photo changed
    domain_check(enc, emb, folder=gallery)
    assert enc.calls == 3
    (gallery / REFERENCE_FILE).write_bytes(b"not an npz")  # damaged
    domain_check(enc, emb, folder=gallery)
    assert enc.calls == 4
    domain_check(enc, emb, folder=gallery)
    assert enc.calls == 4  # and kept again
    (gallery / REFERENCE_FILE).unlink()
    (gallery / REFERENCE_FILE).mkdir()  # a path no file can take
    with caplog.at_level("WARNING", logger="agentcir"):
        assert domain_check(enc, emb, folder=gallery) == domain_check(enc, emb)  # the check itself goes on
    assert "could not be kept" in caplog.text
