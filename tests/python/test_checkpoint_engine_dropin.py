"""examples/checkpoint_engine_replacement.py (a checkpoint-engine-style script
whose only deltacast lines are its imports) under torchrun with 2 ranks,
against the vLLM stand-in (tests/python/vllm_standin/server.py: 2
tensor-parallel worker processes with vLLM's parameter names, the worker
extension mixed in as vLLM does): exact after every update, deltas after the
first; a worker that fails, a rank that dies."""
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("DELTACAST_SOURCE_DIR", os.path.join(HERE, "..", ".."))
EXAMPLE = os.path.join(SOURCE, "examples", "checkpoint_engine_replacement.py")
STANDIN = os.path.join(HERE, "vllm_standin")
sys.path.insert(0, STANDIN)
from tiny_llama import CONFIG, checkpoint_tensors, save_checkpoint, step_digests  # noqa: E402

TP = 2


def example_module():
    spec = importlib.util.spec_from_file_location("checkpoint_engine_replacement", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port_pair():
    """A port p with p + 1 free too (torchrun's store, then the ParameterServers')."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


@pytest.fixture
def checkpoint(tmp_path):
    """The model's Hugging Face tensors in two safetensors files (one per trainer rank)."""
    tensors = checkpoint_tensors(seed=11)
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    save_checkpoint(directory, tensors)
    return directory, tensors


class Standin:
    def __init__(self, tmp_path, worker_timeout=60):
        port_file = tmp_path / "standin.port"
        env = dict(os.environ, DELTACAST_TIMEOUT=str(worker_timeout))
        self.log_path = tmp_path / "standin.log"
        self.proc = subprocess.Popen([sys.executable, os.path.join(STANDIN, "server.py"), "--tp", str(TP),
                                      "--port-file", str(port_file)], env=env,
                                     stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not port_file.exists():
            assert self.proc.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, "the stand-in server did not start"
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{port_file.read_text()}"

    def rpc(self, method, *args):
        request = urllib.request.Request(f"{self.url}/collective_rpc", data=json.dumps(
            {"method": method, "args": list(args)}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())["results"]

    def log(self):
        with urllib.request.urlopen(f"{self.url}/standin/log", timeout=60) as answer:
            return json.loads(answer.read())

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def standin(tmp_path):
    server = Standin(tmp_path)
    yield server
    server.close()


def script_args(directory, standin, steps, timeout):
    return [EXAMPLE, "--checkpoint-path", str(directory), "--endpoint", standin.url,
            "--inference-parallel-size", str(TP), "--steps", str(steps), "--timeout", str(timeout)]


def torchrun(args, timeout, env=None):
    # --redirects/--tee 1: also what torch 1.13's launcher under Python 3.11 needs to start at all.
    command = [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
               "--nproc_per_node", "2", "--master_port", str(free_port_pair()), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def expected_digests(tensors, steps, config=CONFIG):
    """Per step, per tensor-parallel rank: the reference the workers are held to."""
    return step_digests(tensors, steps, example_module().trained, TP, config)


def test_checkpoint_engine_script_runs_unchanged_and_sends_deltas(checkpoint, standin):
    directory, tensors = checkpoint
    steps = 3
    run = torchrun(script_args(directory, standin, steps, 120), timeout=400)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    log = standin.log()
    assert len(log) == steps
    for step, (entry, expected) in enumerate(zip(log, expected_digests(tensors, steps))):
        assert [status for status, _ in entry["outcomes"]] == ["ok"] * TP, entry["outcomes"]
        for rank in range(TP):
            assert entry["digests"][rank] == expected[rank], f"step {step}, tensor-parallel rank {rank}"
    received = [[result["received_bytes"] for _, result in entry["outcomes"]] for entry in log]
    in_place = {result["in_place"] for _, result in log[0]["outcomes"]}
    assert in_place == {len(expected_digests(tensors, 1)[0][0]) - 2}  # all but the padded vocabularies
    for step in range(1, steps):
        for rank in range(TP):
            assert received[step][rank] < received[0][rank] / 4, received
    assert standin.rpc("standin_processed_after_loading") == [str(steps)] * TP  # vLLM's post-load hook ran
    print("bytes received per update and worker:", received)


def test_a_worker_failing_mid_update_is_named_and_nothing_hangs(checkpoint, standin):
    directory, tensors = checkpoint
    standin.rpc("standin_fail_next_load", "worker 1 ran out of memory", 1)
    start = time.monotonic()
    run = torchrun(script_args(directory, standin, 1, 60), timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert time.monotonic() - start < 120
    # Both trainer ranks raise, naming the worker and its error (vLLM's HTTP answer has neither).
    assert output.count("UpdateError") >= 2, output[-4000:]
    assert "rank 1 (CPU-" in output and "RuntimeError: worker 1 ran out of memory" in output, output[-4000:]
    entry = standin.log()[0]
    assert [status for status, _ in entry["outcomes"]] == ["ok", "error"]
    assert entry["digests"][0] == expected_digests(tensors, 1)[0][0]  # the other worker finished


def test_a_trainer_rank_that_dies_fails_the_update_naming_it(checkpoint, tmp_path):
    """Ranks as torchrun starts them, but as plain processes: torchrun itself would tear the
    job down when one dies."""
    directory, tensors = checkpoint
    standin = Standin(tmp_path, worker_timeout=8)
    try:
        port = free_port_pair()
        ranks = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DELTACAST_RENDEZVOUS_TIMEOUT="10")
            ranks.append(subprocess.Popen([sys.executable, *script_args(directory, standin, 50, 15)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        deadline = time.monotonic() + 120
        while len(standin.log()) < 2:
            assert ranks[0].poll() is None and ranks[1].poll() is None, ranks[0].communicate()[0][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ranks[1].send_signal(signal.SIGKILL)
        start = time.monotonic()
        output, _ = ranks[0].communicate(timeout=180)
        assert ranks[0].returncode != 0
        assert time.monotonic() - start < 90
        assert "rank(s) 1 of 2 did not take part" in output, output[-4000:]
        # Every update the workers took is one whole step: never part of one.
        digests = standin.rpc("standin_digests")
        expected = expected_digests(tensors, len(standin.log()) + 1)
        assert any(digests == step for step in expected), "the workers hold no step whole"
    finally:
        for p in ranks:
            p.kill()
        standin.close()
