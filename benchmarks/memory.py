"""Peak extra memory of one benchmark provider call, in a fresh process.

    python benchmarks/memory.py bench_octopus_topk.py Q64-K10-N100k-d512 numba-f32

Builds the inputs, makes one warm-up call (compilation, allocator and thread-pool set-up),
then resets the kernel's peak-RSS counter (``/proc/self/clear_refs``), makes the measured
call and prints JSON: ``peak_extra_mb`` = peak RSS during the call minus RSS before it
(every allocator: numpy, numba, torch, faiss), and ``tracemalloc_peak_mb`` (numpy and
Python allocations only). Run it with ``MALLOC_MMAP_THRESHOLD_=65536`` (as conftest.py
does) so freed buffers return to the OS and RSS follows live memory.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import sys
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def main(bench_file: str, size_name: str, provider: str) -> dict:
    spec = importlib.util.spec_from_file_location(Path(bench_file).stem, HERE / bench_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from sizes import sizes

    size = next(s for s in sizes(mod.OP) if s["name"] == size_name)
    inputs = mod.make_inputs(size, with_reference=False)
    fn = mod.PROVIDERS[provider]
    fn(inputs)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _status("VmRSS")
    tracemalloc.start()
    fn(inputs)
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    peak = _status("VmHWM")
    return {"peak_extra_mb": round((peak - base) / 2**20, 1), "tracemalloc_peak_mb": round(traced / 2**20, 1)}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
