"""No RDMA device on this machine: asking for the RDMA transport says why and runs over TCP."""
import json
import os
import subprocess

import pytest

BIN = os.environ.get("DELTACAST_BIN_DIR", "build/bin")


def has_rdma_device():
    return os.path.isdir("/sys/class/infiniband") and bool(os.listdir("/sys/class/infiniband"))


@pytest.mark.skipif(has_rdma_device(), reason="this machine has an RDMA device: there is no fallback to see")
def test_rdma_without_a_device_falls_back_to_tcp_and_says_so():
    out = subprocess.run([os.path.join(BIN, "deltacast-bench"), "wire", "--transport", "rdma", "--rails", "2",
                          "--bytes", str(32 << 20), "--baseline-seconds", "0.2", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["transport"] == "tcp"
    assert "no RDMA device" in report["transport_fallback"] or "no RDMA support" in report["transport_fallback"]
    assert "using TCP" in out.stderr, "the user is told, not only the JSON"
    assert report["verified"]


def test_an_unknown_transport_is_refused():
    out = subprocess.run([os.path.join(BIN, "deltacast-bench"), "wire", "--transport", "carrier-pigeon"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "carrier-pigeon" in out.stderr


@pytest.mark.skipif(has_rdma_device(), reason="this machine has an RDMA device")
def test_rail_discovery_says_why_there_are_no_rdma_ports():
    out = subprocess.run([os.path.join(BIN, "deltacast-bench"), "rails", "--json"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["rdma_ports"] == []
    assert report["rdma_unavailable"]
    assert all("name" in n and "numa_node" in n for n in report["nics"])


@pytest.mark.skipif(has_rdma_device(), reason="this machine has an RDMA device: there is no fallback to see")
@pytest.mark.parametrize("transport", ["rdma", "auto"])
def test_the_engine_without_a_device_falls_back_to_tcp_and_says_so_once(transport):
    """A producer and two consumer processes asked for RDMA: each says once why it uses TCP, and
    every version still arrives exact."""
    out = subprocess.run([os.path.join(BIN, "deltacast-bench"), "sync", "--transport", transport, "--consumers", "2",
                          "--elements", str(1 << 20), "--versions", "2", "--no-dense", "--gloo", "off", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["transport"] == "tcp" and report["all_exact"], report
    # Once: the consumers it starts are told the transport the producer resolved to.
    assert out.stderr.count("using TCP") == 1, out.stderr
