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
    data = {"names": ["a", "b"], "n": 3, "x": 1.5, "ok": True, "none": None, "nested": {"t": (1, 2)},
            "arr": np.arange(6, dtype=np.float16).reshape(2, 3), "scalar": np.float32(2.5),
            "tensor": torch.arange(6, dtype=torch.float16).reshape(2, 3), "ids": [torch.tensor(0), torch.tensor(1)]}
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


@pytest.mark.parametrize("module,name", [("builtins", "eval"), ("subprocess", "Popen"), ("torch", "load"),
                                         ("numpy", "load"), ("torch._utils", "_rebuild_parameter_with_state")])
def test_other_globals_are_refused(module, name):
    blob = b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c" + bytes([len(module)]) + module.encode() + \
        b"\x8c" + bytes([len(name)]) + name.encode() + b"\x93."
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
