#!/usr/bin/env python3
"""A trainer syncing its weights to a running vLLM server through the `deltacast` weight-transfer
backend: the model trains (AdamW on random tokens, bf16 weights), and after every step
send_weights() publishes them; only the change crosses the network, and the server applies each
version atomically while it serves.

The server (vLLM with deltacast installed, dev-mode routes on):

    VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server --model MODEL_DIR \\
        --weight-transfer-config '{"backend": "deltacast"}'

The trainer, on the same checkpoint:

    python examples/vllm_trainer.py --model MODEL_DIR --url http://127.0.0.1:8000 --steps 5

Several trainer ranks: run it under torchrun; each rank publishes its share of the tensors."""
import argparse
import os

import torch
from transformers import AutoModelForCausalLM
from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient, ModuleSource, WeightTransferTrainerFactory

from deltacast.integrations.vllm import DeltacastTrainerInitInfo


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the checkpoint the server started from")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--coordinator", default="127.0.0.1:29700", help="where rank 0 hosts the group (host:port)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-5)
    args = parser.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        torch.distributed.init_process_group("gloo")
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    # The deltacast lines: one engine per trainer rank, then send_weights() after each step.
    engine = WeightTransferTrainerFactory.trainer_init(
        DeltacastTrainerInitInfo(rank=rank, world_size=world, coordinator=args.coordinator,
                                 token=os.environ.get("DELTACAST_TOKEN", "change-me")),
        client=HTTPVLLMWeightSyncClient(args.url), source=ModuleSource(model))
    engine.send_weights()  # the first version: whole

    g = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        tokens = torch.randint(0, model.config.vocab_size, (4, 32), generator=g)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        version = engine.send_weights()
        if rank == 0:
            done = [r["result"] for r in engine.last_reports if r.get("result")]
            print(f"step {step}: loss {loss.item():.3f}, version {version} applied on {len(done)} worker(s) in "
                  f"{engine.last_update_seconds:.3f} s, {max(r['received_bytes'] for r in done)} bytes per worker",
                  flush=True)
    engine.shutdown()


if __name__ == "__main__":
    main()
