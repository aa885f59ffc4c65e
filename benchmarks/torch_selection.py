"""The torch backend's running top-k: each tile cut by a float ``topk`` first, or selected on packed keys.

``RunningTopK`` (``agentcir/kernels/torch/_common.py``) takes a tile's candidates one of two ways:
``float_first`` (the default on a CPU: ``torch.topk`` on the float scores, packed keys only where the
k-th place is a tie) or packed int64 ``(score, id)`` keys over the whole tile (the default on a GPU).
This times both over random float32 score blocks streamed in the CPU backend's tiles
(``_tiling.tile_rows``), interleaved, medians of ``--rounds``, on the device given::

    PYTHONPATH=$PWD python benchmarks/torch_selection.py [--device cpu] [--rounds 7] [--items N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from agentcir.kernels.torch._common import RunningTopK, device_tile_rows

SHAPES = ((1, 1_000_000), (64, 100_000), (640, 100_000))  # cosine Q=1, Q=64; OCTOPUS's Q*K proxy rows


def select(S: torch.Tensor, k: int, tile: int, float_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
    top = RunningTopK(S.shape[0], k, S.device, float_first=float_first)
    for start in range(0, S.shape[1], tile):
        top.push(S[:, start : start + tile], start)
    return top.result()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--items", type=int, default=0, help="scores per row for every shape (default: 1M for Q=1, else 100k)"
    )
    a = ap.parse_args(argv)
    dev = torch.device(a.device)
    gen = torch.Generator(device=dev).manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {dev}; k = 10")
    for Q, N in SHAPES:
        N = a.items or N
        S = torch.randn(Q, N, device=dev, generator=gen)
        tile = device_tile_rows(Q, 512, N, dev)
        a_s, a_i = select(S, 10, tile, True)
        b_s, b_i = select(S, 10, tile, False)
        assert torch.equal(a_i, b_i) and torch.equal(a_s, b_s), "the two selections differ"
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(a.rounds):
            for ff in (True, False):
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t = time.perf_counter()
                select(S, 10, tile, ff)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                times[ff].append(time.perf_counter() - t)
        f, p = (statistics.median(times[x]) * 1e3 for x in (True, False))
        print(f"Q={Q:4d} N={N:8d} tile={tile:6d}: float first {f:8.2f} ms, packed keys {p:8.2f} ms ({p / f:.2f}x)")


if __name__ == "__main__":
    main()
