"""The checkpoint-engine-style facade: a safetensors checkpoint pushed to two
worker processes, then updated in place and pushed again as a delta."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import deltacast
from deltacast import compat, safetensors_io

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "compat-test"


def checkpoint(rng):
    return {"embed.weight": (rng.integers(0, 2 ** 16, (128, 64), dtype=np.uint16), "bf16"),
            "norm.weight": rng.standard_normal(64).astype(np.float32),
            "step": np.array([7], dtype=np.int64)}


def run_workers(address, spec, tmp_path, n):
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "worker_proc.py"), address, TOKEN,
                               json.dumps(spec), str(tmp_path / f"w{i}.npz")], stdout=subprocess.PIPE, text=True)
             for i in range(n)]
    return procs


def test_safetensors_checkpoint_to_two_workers_then_a_delta(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "model.safetensors"
    safetensors_io.save(path, checkpoint(rng))
    with compat.ParameterServer(token=TOKEN) as ps:
        ps.register_checkpoint("step-7", files=[str(path)])
        metas = ps.gather_metas("step-7")
        assert [t["name"] for t in metas["tensors"]] == ["embed.weight", "norm.weight", "step"]
        assert metas["tensors"][0]["dtype"] == "bf16" and metas["tensors"][0]["shape"] == [128, 64]
        spec = [[t["name"], t["dtype"] if t["dtype"] == "bf16" else {"f32": "float32", "i64": "int64"}[t["dtype"]],
                 t["shape"]] for t in metas["tensors"]]
        answers = []

        def req_func(address):  # like an HTTP call that returns once the engines loaded the weights
            for p in run_workers(address, spec, tmp_path, 2):
                out, _ = p.communicate(timeout=60)
                answers.append((p.returncode, json.loads(out)["version"] if out else None))

        report = ps.update("step-7", req_func=req_func, ranks=[0, 1], timeout=60)
        assert report["full"] and report["version"] == 1, report
        assert answers == [(0, 1), (0, 1)]
        expected = safetensors_io.load(path)
        for i in range(2):
            got = np.load(tmp_path / f"w{i}.npz")
            for name, value in expected.items():
                array = value[0] if isinstance(value, tuple) else value
                assert got[name].tobytes() == array.tobytes(), (i, name)

        with pytest.raises(deltacast.InvalidArgumentError, match="already registered"):
            ps.register_checkpoint("step-7", named_tensors={"x": np.zeros(1)})
        ps.unregister_checkpoint("step-7")
        with pytest.raises(deltacast.InvalidArgumentError, match="not registered"):
            ps.gather_metas("step-7")


def test_update_sends_only_the_change_to_a_kept_worker():
    rng = np.random.default_rng(4)
    weights = checkpoint(rng)
    target = {"embed.weight": (np.zeros((128, 64), np.uint16), "bf16"), "norm.weight": np.zeros(64, np.float32),
              "step": np.zeros(1, np.int64)}
    with compat.ParameterServer(token=TOKEN) as ps:
        ps.register_checkpoint("live", named_tensors=weights)
        address = ps.gather_metas("live")["address"]
        worker = compat.Worker(target, address, token=TOKEN).start()
        first = ps.update("live", ranks=[0], timeout=30)
        weights["norm.weight"][:4] += 1.0
        second = ps.update("live", ranks=[0], timeout=30)
        assert first["full"] and not second["full"] and second["changed"] == 4
        assert second["wire_bytes"] < first["wire_bytes"] / 10
        assert target["norm.weight"].tobytes() == weights["norm.weight"].tobytes()
        assert target["embed.weight"][0].tobytes() == weights["embed.weight"][0].tobytes()
        worker.close()
