"""Release pickles are read without running code: plain data, arrays and tensors only."""

import io
import os
import pickle

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.safe_pickle import UnsafePickleError, safe_load, safe_loads


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_plain_data_arrays_and_tensors_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    data = {
        "names": ["a", "b"],
        "n": 3,
        "x": 1.5,
        "ok": True,
        "none": None,
        "nested": {"t": (1, 2)},
        "arr": np.arange(6, dtype=np.float16).reshape(2, 3),
        "scalar": np.float32(2.5),
        "tensor": torch.arange(6, dtype=torch.float16).reshape(2, 3),
        "ids": [torch.tensor(0), torch.tensor(1)],
    }
    path = tmp_path / "ok.pkl"
    path.write_bytes(pickle.dumps(data))  # plain pickle.dump, as the OCTOPUS release wrote its files
    out = safe_load(path)
    assert out["names"] == ["a", "b"] and out["nested"] == {"t": (1, 2)} and out["scalar"] == np.float32(2.5)
    np.testing.assert_array_equal(out["arr"], data["arr"])
    assert torch.equal(out["tensor"], data["tensor"]) and out["tensor"].dtype == torch.float16
    assert [int(i) for i in out["ids"]] == [0, 1]


def test_a_malicious_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    blob = pickle.dumps({"index_features": [1.0], "evil": _Evil(marker)})
    with pytest.raises(UnsafePickleError, match=r"refused to load '(posix|os|nt)\.system'"):
        safe_loads(blob, where="release file")
    assert not marker.exists()
    # the same bytes with pickle.load would have run the command: the test's payload is real
    pickle.loads(blob)
    assert marker.exists()


@pytest.mark.parametrize(
    "module,name",
    [
        ("builtins", "eval"),
        ("subprocess", "Popen"),
        ("torch", "load"),
        ("numpy", "load"),
        ("torch._utils", "_rebuild_parameter_with_state"),
    ],
)
def test_other_globals_are_refused(module, name):
    blob = (
        b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c"
        + bytes([len(module)])
        + module.encode()
        + b"\x8c"
        + bytes([len(name)])
        + name.encode()
        + b"\x93."
    )
    with pytest.raises(UnsafePickleError, match=f"refused to load '{module}.{name}'"):
        safe_loads(blob)


def test_code_inside_a_tensor_payload_is_refused(tmp_path):
    """torch's own _load_from_bytes would torch.load(weights_only=False) the embedded bytes."""
    torch = pytest.importorskip("torch")
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save(_Evil(marker), buf, _use_new_zipfile_serialization=False)

    class Wrapped:
        def __reduce__(self):
            return (torch.storage._load_from_bytes, (buf.getvalue(),))

    with pytest.raises(UnsafePickleError, match="weights-only loader"):
        safe_loads(pickle.dumps({"t": Wrapped()}))
    assert not marker.exists()


def test_bad_files_name_the_file(tmp_path):
    with pytest.raises(InputError, match="pickle '.*nope.pkl' not found"):
        safe_load(tmp_path / "nope.pkl")
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle at all")
    with pytest.raises(InputError, match="junk.pkl': not a readable pickle"):
        safe_load(tmp_path / "junk.pkl")


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_numpy_pickles_of_every_protocol(protocol):
    data = {
        "emb": np.arange(12, dtype=np.float32).reshape(3, 4),
        "ids": np.array([3, 1, 2], np.int64),
        "fortran": np.asfortranarray(np.ones((2, 3), np.float64)),
        "mask": np.array([True, False]),
        "u16": np.array([7], np.uint16),
        "scalar": np.float32(1.5),
        "count": np.int64(4),
        "raw": b"\x00\xff\x80",
    }
    out = safe_loads(pickle.dumps(data, protocol=protocol))
    for k, v in data.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(out[k], v)
            assert out[k].dtype == v.dtype and out[k].shape == v.shape
        else:
            assert out[k] == v and type(out[k]) is type(v)
    assert out["fortran"].flags.f_contiguous


def test_the_protocol_helpers_run_nothing_else():
    import pickletools

    # protocols 0-2 spell bytes as _codecs.encode(text, "latin1"); any other codec is refused
    blob = pickle.dumps(b"abc", protocol=2).replace(b"latin1", b"rot_13")
    assert any(
        op.name == "GLOBAL" and arg == "_codecs encode"
        for op, arg, _ in pickletools.genops(pickle.dumps(b"x", protocol=2))
    )
    with pytest.raises(UnsafePickleError, match="refused '_codecs.encode' with encoding 'rot_13'"):
        safe_loads(blob)
    # protocol 5's _frombuffer: an object dtype (pointers read from the file) is refused
    blob = pickle.dumps(np.zeros(2, np.int64), protocol=5)
    assert b"\x8c\x02i8" in blob
    blob = blob.replace(b"\x8c\x02i8", b"\x8c\x02O8")
    with pytest.raises(UnsafePickleError, match="refused an array of dtype"):
        safe_loads(blob)
    # and protocol 5 still refuses other globals
    with pytest.raises(UnsafePickleError, match=r"refused to load '(posix|os|nt)\.system'"):
        safe_loads(pickle.dumps(_Evil("/nonexistent/x"), protocol=5))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_dtype_whose_state_hides_its_objects_is_refused(protocol):
    """An object dtype whose pickled state claims it holds no objects (byte order '<', flags 0):
    numpy would read the file's raw bytes as object pointers."""
    blob = pickle.dumps(np.zeros(2, np.int64), protocol=protocol)
    assert b"i8" in blob
    blob = blob.replace(b"i8", b"O8")
    with pytest.raises(UnsafePickleError, match="refused an (object array whose data are raw bytes|array of dtype)"):
        safe_loads(blob)


def test_object_arrays_and_structured_arrays_still_round_trip():
    data = {
        "names": np.array(["a", None, 3], dtype=object),
        "nested": np.array([np.zeros(2)], dtype=object),
        "rec": np.array([(1, 2.5)], dtype=[("id", "<i4"), ("w", "<f8")]),
    }
    for protocol in (2, 5):
        out = safe_loads(pickle.dumps(data, protocol=protocol))
        assert type(out["names"]) is np.ndarray and out["names"].tolist() == ["a", None, 3]
        assert type(out["nested"][0]) is np.ndarray and out["nested"][0].tolist() == [0.0, 0.0]
        assert type(out["rec"]) is np.ndarray and out["rec"].dtype == data["rec"].dtype and out["rec"]["w"][0] == 2.5


def test_a_scalar_whose_dtype_hides_its_objects_reads_no_pointer():
    blob = pickle.dumps(np.int64(7), protocol=2)
    assert b"i8" in blob
    with pytest.raises(InputError):  # an object scalar made from 8 raw bytes of the file
        safe_loads(blob.replace(b"i8", b"O8"))
