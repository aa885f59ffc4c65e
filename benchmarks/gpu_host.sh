#!/usr/bin/env bash
# On a machine with a CUDA GPU, one pass: what the machine is, the GPU backend's two paths against torch on
# the GPU (gpu_check.py: correctness, timings, faiss's GPU index where a faiss build with GPUs is installed;
# torch_selection.py: the running top-k's two tile selections on the GPU), then the portable targets on the
# machine's own CPU (native ISA, fresh tune file) and the fused OCTOPUS per thread count (thread_scaling.py).
# Everything goes to OUT.
#
#   bash benchmarks/gpu_host.sh [OUT]          # OUT defaults to runs/gpu-host
#   ROUNDS=5 CPU_S=300 bash benchmarks/gpu_host.sh /tmp/out
set -u
cd "$(dirname "$0")/.."
OUT="${1:-runs/gpu-host}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
{
  echo "== machine $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  lscpu | grep -E "Model name|^CPU\(s\)|L2|L3" || true
  grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|avx512_fp16|amx_tile" /proc/cpuinfo | sort | uniq -c || true
  "$PY" -c "import torch, triton, numba, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__)"
  echo "== gpu_check"
  timeout "${GPU_S:-300}" "$PY" benchmarks/gpu_check.py
  echo "gpu_check exit $?"
  timeout 60 "$PY" benchmarks/torch_selection.py --device cuda
  echo "torch_selection exit $?"
} 2>&1 | tee "$OUT/gpu.log"
K='(Q64-N100k or Q1-N1M or Q64-K10) and (numba-f32- or numba-f16- or numba-bf16- or faiss-flatip-blas or torch-naive or torch-f32- or numpy-sum-read- or numpy-gemv or numba-int8)'
{
  echo "== CPU targets $(date -u +%FT%TZ)"
  AGENTCIR_BENCH_ROUNDS="${ROUNDS:-5}" AGENTCIR_KERNELS_TUNE_FILE="$OUT/tune.json" timeout "${CPU_S:-600}" \
    "$PY" -m pytest benchmarks/bench_cosine_topk.py benchmarks/bench_octopus_topk.py -q -p no:cacheprovider \
    --benchmark-only -k "$K" --benchmark-json="$OUT/cpu.json"
  echo "pytest exit $?"
  [ -f "$OUT/cpu.json" ] && "$PY" benchmarks/report.py "$OUT/cpu.json"
  AGENTCIR_KERNELS_TUNE_FILE="$OUT/tune.json" timeout 150 "$PY" benchmarks/thread_scaling.py --threads "1,$(nproc)" --rounds 3
  echo "thread_scaling exit $?"
} 2>&1 | tee "$OUT/cpu.log"
