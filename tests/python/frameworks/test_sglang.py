"""deltacast as SGLang's custom weight loader, against SGLang's own model class: SGLang 0.5's
LlamaForCausalLM built and loaded on this CPU as SGLang's model runner does (sglang_parts), with
the loader called as SGLang calls a custom loader. SGLang's server needs CUDA kernels and does not
run here; everything below it that the loader touches does."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
import sglang_parts
import tiny_model

HERE = os.path.dirname(os.path.abspath(__file__))


def part_env():
    return dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(scope="module")
def seen():
    """What the one-process scenarios of sglang_parts saw (one SGLang start for both)."""
    return run_part("syncs,failures")


def run_part(name, timeout=600):
    """Scenarios of sglang_parts (comma-separated) in a process of their own; what they saw."""
    done = subprocess.run([sys.executable, os.path.join(HERE, "sglang_parts.py"), name], capture_output=True,
                          text=True, timeout=timeout, env=part_env())
    assert done.returncode == 0, f"sglang_parts {name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sglang_loader_applies_every_version_exact_in_place(seen):
    seen = seen["syncs"]
    rows, dense = seen["rows"], seen["dense"]
    for row in rows:
        print(f"SGLang sync {row['version']}: {row['received_bytes']} B received ({row['received_bytes'] / dense:.4f} "
              f"of {dense} B), {row['in_place']} parameters in place, {row['loaded']} through load_weights, "
              f"{row['seconds']:.3f} s", flush=True)
        assert row["wrong"] == [], f"version {row['version']}: not what SGLang loads from that step: {row['wrong']}"
        assert row["held"] == row["version"], row
    # Every parameter of SGLang's Llama holds the checkpoint's bytes on this CPU, the fused
    # qkv_proj and gate_up_proj rows included: all written in place, none reloaded.
    assert seen["in_place_names"] == seen["parameters"], seen["in_place_names"]
    assert any(n.endswith("qkv_proj.weight") for n in seen["in_place_names"])
    assert all(row["loaded"] == 0 for row in rows), rows
    # The first version comes whole; every later one is the change (about 1% of the elements).
    assert rows[0]["received_bytes"] >= dense
    assert all(row["received_bytes"] < dense / 20 for row in rows[1:]), rows


def test_sglang_loader_failures_leave_the_model_as_it_was(seen):
    seen = seen["failures"]
    # A version never published: a timeout that wrote nothing.
    assert "version 7 not applied, nothing written anywhere" in seen["unpublished"], seen["unpublished"]
    assert "did not arrive whole and verified in time" in seen["unpublished"]
    assert seen["unpublished_wrote"] == []
    # load_weights failing half way through: every parameter put back, the error names the worker.
    assert "every worker put back what it wrote" in seen["failed_load"], seen["failed_load"]
    assert "sglang tp rank 0 of 1" in seen["failed_load"] and "injected" in seen["failed_load"]
    assert seen["failed_load_wrote"] == [] and seen["after_failed_load"] == []
    assert seen["retry_wrong"] == [], "the version after a failed one did not apply exact"
    # Requests that are not deltacast's are refused, naming what is wrong.
    assert "no '__deltacast__' tensor" in seen["no_spec"], seen["no_spec"]
    assert "is not a deltacast request" in seen["garbage"], seen["garbage"]
    assert "weights sent along" in seen["weights_along"] and "lm_head.weight" in seen["weights_along"]
    assert seen["last_wrong"] == []


class TpWorker:
    """sglang_parts.tp_worker in a process of its own, answering one JSON line per request."""

    def __init__(self, rank, size, port, coordinator, log_dir):
        self.rank, self.log = rank, os.path.join(log_dir, f"tp{rank}.log")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "sglang_parts.py"), "tp_worker", str(rank),
                                      str(size), str(port), coordinator], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(self.log, "w"), text=True, env=part_env())
        self.lines = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()

    def answer(self, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                return json.loads(self.lines.get(timeout=1))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
        raise AssertionError(f"tp worker {self.rank} said nothing (exit code {self.proc.poll()}):\n"
                             f"{open(self.log).read()[-4000:]}")

    def load(self, version):
        self.proc.stdin.write(f"load {version}\n")
        self.proc.stdin.flush()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def test_sglang_tp2_workers_apply_together_and_one_killed_mid_update_leaves_the_other_as_it_was(tmp_path):
    """Two tensor-parallel workers (processes, SGLang's TP group over gloo), each holding its share
    of the model. Both apply versions 1 and 2 exact; during version 3 worker 1 is killed while
    worker 0 is in the update: worker 0 raises naming the broken exchange, having written nothing."""
    steps = tiny_model.step_tensors(4)
    trainer = sglang_parts.Trainer(steps[0])
    world_port = sglang_parts.free_port()
    workers = [TpWorker(r, 2, world_port, trainer.coordinator, tmp_path) for r in range(2)]
    try:
        assert [w.answer()["ready"] for w in workers] == [0, 1]
        for version in (1, 2):
            trainer.publish(steps[version], version)
            for w in workers:
                w.load(version)
            for w in workers:
                answer = w.answer()
                assert answer["error"] is None and answer["wrong"] == [], (w.rank, answer)
                assert answer["in_place"] == 15, answer  # every parameter's share, fused rows included
        trainer.publish(steps[3], 3)
        workers[0].load(3)
        time.sleep(2)  # worker 0 holds version 3 staged and waits for worker 1 in the exchange
        os.kill(workers[1].proc.pid, signal.SIGKILL)
        answer = workers[0].answer()
        print(f"worker 0 after worker 1 was killed: {answer['error']}", flush=True)
        assert answer["error"] and "version 3 not applied, nothing written anywhere" in answer["error"], answer
        assert "exchange between workers broke" in answer["error"], answer
        assert answer["wrote"] == [], answer
    finally:
        for w in workers:
            w.stop()
        trainer.close()
