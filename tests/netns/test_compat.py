"""The checkpoint-engine script across hosts: two trainer ranks in network
namespaces of their own (t0, t1) and the vLLM stand-in with its two
tensor-parallel workers on a third (v), joined by two switched planes. The
script is unchanged; the environment gives each side its rails (both planes)
and the token. The workers receive from both ranks over both planes; every
update is exact and later ones are deltas. Needs root."""
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
PYTHON_TESTS = os.path.join(HERE, "..", "python")
sys.path.insert(0, PYTHON_TESTS)
MASTER_PORT = 7600
HTTP_WAIT = 120


def interface_of(tb, host, address):
    """The name of the interface holding `address` in `host`'s namespace."""
    out = subprocess.run(tb.netns_argv(host, ["ip", "-o", "-4", "addr", "show"]), capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields[3].split("/")[0] == address:
            return fields[1]
    raise AssertionError(f"{host} has no interface with {address}")


def get_in(tb, host, url):
    """GET `url` from inside `host`'s namespace (the test itself runs outside every one)."""
    fetch = f"import sys, urllib.request; sys.stdout.write(urllib.request.urlopen({url!r}, timeout=30).read().decode())"
    return subprocess.run(tb.netns_argv(host, [sys.executable, "-c", fetch]), capture_output=True, text=True,
                          check=True, timeout=60).stdout


def rails(tb, host):
    return ",".join(tb.plane_address(plane, host) for plane in range(len(tb.planes)))


def test_the_checkpoint_engine_script_updates_workers_on_another_host_over_both_planes(make_testbed, tmp_path):
    from test_checkpoint_engine_dropin import EXAMPLE, STANDIN, TP, expected_digests
    from tiny_llama import CONFIG, checkpoint_tensors, save_checkpoint

    tb = make_testbed(["t0", "t1", "v"], planes=["1gbit", "1gbit"])
    # Large enough (about 10 MiB of bf16) for every version to be spread over both planes.
    config = dict(CONFIG, vocab=1000, hidden=512, head_dim=128, intermediate=1024)
    tensors = checkpoint_tensors(config, seed=21)
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    save_checkpoint(directory, tensors)
    base = dict(os.environ, DELTACAST_TOKEN="across-hosts", PYTHONDONTWRITEBYTECODE="1")
    port_file = tmp_path / "standin.port"
    server = tb.spawn("v", [sys.executable, os.path.join(STANDIN, "server.py"), "--tp", str(TP), "--host", "0.0.0.0",
                            "--config", json.dumps(config), "--port-file", str(port_file)], env=dict(base, DELTACAST_RAILS=rails(tb, "v")),
                      stdout=log_sink("standin"), stderr=subprocess.STDOUT)
    ranks = []
    try:
        deadline = time.monotonic() + HTTP_WAIT
        while not port_file.exists():
            assert server.poll() is None and time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.1)
        endpoint = f"http://{tb.plane_address(0, 'v')}:{port_file.read_text()}"
        steps = 3
        for rank, host in enumerate(("t0", "t1")):
            env = dict(base, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR=tb.plane_address(0, "t0"), MASTER_PORT=str(MASTER_PORT),
                       DELTACAST_RAILS=rails(tb, host),
                       # The script's torch.distributed group (gloo) would take the host name's address.
                       GLOO_SOCKET_IFNAME=interface_of(tb, host, tb.plane_address(0, host)),
                       DELTACAST_RENDEZVOUS_TIMEOUT=os.environ.get("COMPAT_NETNS_RENDEZVOUS", "60"))
            ranks.append(tb.spawn(host, [sys.executable, "-X", "faulthandler", EXAMPLE, "--checkpoint-path", str(directory), "--endpoint",
                                         endpoint, "--inference-parallel-size", str(TP), "--steps", str(steps),
                                         "--timeout", "120"],
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
        log = json.loads(get_in(tb, "t0", f"{endpoint}/standin/log"))
        assert len(log) == steps
        for step, (entry, expected) in enumerate(zip(log, expected_digests(tensors, steps, config))):
            assert [status for status, _ in entry["outcomes"]] == ["ok"] * TP, entry["outcomes"]
            assert entry["digests"] == expected, f"step {step}"
        received = [[result["received_bytes"] for _, result in entry["outcomes"]] for entry in log]
        assert all(later < first / 4 for first, later in zip(received[0], received[-1])), received
        print("bytes received per update and worker:", received)
        per_plane = tb.received_bytes("v")
        print("bytes in per interface of the workers' host:", per_plane)
        assert len(per_plane) == 2 and min(per_plane.values()) > sum(per_plane.values()) / 5, per_plane
    finally:
        for proc in ranks:
            proc.kill()
        server.terminate()
        server.wait(10)
