"""A trainer process (one rank of `torchrun --nproc-per-node N`, gloo) that syncs the tiny model's
steps to a vLLM server through the `deltacast` weight-transfer backend, as a user's trainer would:
WeightTransferTrainerFactory.trainer_init(...) once, send_weights() per step. Each rank publishes
its share of the tensors (dealt round-robin). Writes what happened per step (version, error, the
workers' reports on rank 0, this rank's wire bytes) as JSON to OUT.rank<r>.json.

Faults, for the atomicity tests:
  --resized-vocab: the trainer's embedding has 64 more rows than the server's model (a tensor the
                   engine's loader refuses);
  --die-at STEP:   rank 1 says it published that step, as its engine does once its part is queued,
                   and is SIGKILLed before any of it leaves; rank 0 publishes and asks the server to
                   apply the version, which never arrives whole."""
import argparse
import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_model  # noqa: E402
from step_source import StepSource  # noqa: E402
from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient, WeightTransferTrainerFactory  # noqa: E402

from deltacast.integrations.vllm import DeltacastTrainerInitInfo  # noqa: E402


def wait_for(path, timeout=600):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never came")
        time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--steps", type=int, nargs="+", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--resized-vocab", action="store_true")
    parser.add_argument("--die-at", type=int, default=None)
    parser.add_argument("--step-files", default=None,
                        help="before each step wait for DIR/go.STEP; rank 0 then writes its record (the test checks "
                             "the server between steps)")
    args = parser.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    steps = tiny_model.step_tensors(max(args.steps) + 1)

    def tensors_of(step):
        t = dict(steps[step])
        if args.resized_vocab:
            t["model.embed_tokens.weight"] = torch.cat([t["model.embed_tokens.weight"]] * 2)[:tiny_model.CONFIG["vocab_size"] + 64]
        return t

    source = StepSource(tensors_of(args.steps[0]))
    record = {"rank": rank, "steps": []}
    engine = WeightTransferTrainerFactory.trainer_init(
        DeltacastTrainerInitInfo(rank=rank, world_size=world, coordinator=args.coordinator, token="tiny-secret",
                                 timeout=args.timeout),
        client=HTTPVLLMWeightSyncClient(args.url, timeout=args.timeout + 30), source=source)
    for step in args.steps:
        if args.step_files:
            wait_for(os.path.join(args.step_files, f"go.{step}"))
        source.tensors = tensors_of(step)
        if args.die_at == step and rank == 1:
            engine._ranks.gather(None)  # "published" (see --die-at)
            os.kill(os.getpid(), signal.SIGKILL)
        entry = {"step": step, "error": None}
        try:
            entry["version"] = engine.send_weights()
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
        entry["wire_bytes"] = engine.producer.report(engine.version)["wire_bytes"] if engine.producer else 0
        entry["reports"] = engine.last_reports
        entry["update_seconds"] = engine.last_update_seconds
        record["steps"].append(entry)
        with open(f"{args.out}.rank{rank}.tmp", "w") as f:
            json.dump(record, f)
        os.replace(f"{args.out}.rank{rank}.tmp", f"{args.out}.rank{rank}.json")  # readers never see half
    engine.shutdown()


if __name__ == "__main__":
    main()
