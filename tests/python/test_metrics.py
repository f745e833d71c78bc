"""Prometheus metrics from Python: a producer and a consumer given metrics_port serve
GET /metrics with the numbers of the run; bad ports are refused by name."""
import re
import urllib.request

import numpy as np
import pytest
import torch

import deltacast

TOKEN = "metrics-test"


def weights():
    torch.manual_seed(0)
    return {"layer.weight": torch.randn(256, 64).to(torch.bfloat16), "layer.bias": torch.randn(256)}


def scrape(address):
    """The samples of GET /metrics at ``address``: {'name{labels}': value}."""
    host, port = address.rsplit(":", 1)
    host = "127.0.0.1" if host == "0.0.0.0" else host
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return samples


def test_a_scrape_shows_the_run():
    w = weights()
    with deltacast.Producer(w, token=TOKEN, metrics_port=0, metrics_host="127.0.0.1") as p:
        mine = weights()
        with deltacast.Consumer(mine, connect=p.address, token=TOKEN, name="rollout-0",
                                metrics_port=0, metrics_host="127.0.0.1") as c:
            c.start()
            # A member before the first version: on loaded cores the consumer could still be joining
            # when version 1 went out, take the versions by a catch-up, and leave commits uncounted.
            p.wait_for_consumers(1, timeout=20)
            for step in range(3):
                with torch.no_grad():
                    w["layer.weight"][step, :8] += 1
                v = p.publish()
                p.wait(v, timeout=20)
            assert re.fullmatch(r"127\.0\.0\.1:\d+", p.metrics_address)
            produced = scrape(p.metrics_address)
            consumed = scrape(c.metrics_address)
            stats = p.stats()
    assert produced["deltacast_version"] == 3
    assert produced["deltacast_versions_total"] == 3
    assert produced["deltacast_commits_total"] == 3
    assert produced["deltacast_wire_bytes_total"] == stats["wire_bytes"]
    assert produced['deltacast_members{state="alive"}'] == 1
    assert [v for k, v in produced.items()
            if k.startswith("deltacast_member_committed_version{") and 'member="rollout-0"' in k] == [3]
    assert sum(v for k, v in produced.items() if k.startswith("deltacast_rail_bytes_total{")) >= stats["wire_bytes"]
    assert consumed["deltacast_version"] == 3
    assert consumed["deltacast_commits_total"] == 3
    assert consumed["deltacast_received_bytes_total"] == stats["wire_bytes"]


def test_no_metrics_unless_asked_and_bad_ports_are_refused():
    with deltacast.Producer({"a": np.zeros(4)}, token=TOKEN) as p:
        assert p.metrics_address is None
    for bad in (-1, 70000, "9100", True):
        with pytest.raises(deltacast.InvalidArgumentError, match="metrics_port"):
            deltacast.Producer({"a": np.zeros(4)}, token=TOKEN, metrics_port=bad)
