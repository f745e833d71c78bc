"""Progress of a long wait from Python: Producer.wait(progress=...) is called with the round's
numbers while consumers still owe the version, and Producer.progress() is None between rounds."""
import threading

import pytest
import torch

import deltacast

TOKEN = "progress-test"


def weights():
    torch.manual_seed(1)
    return {"w": torch.randn(512, 256).to(torch.bfloat16)}


def test_wait_reports_progress_until_every_consumer_committed():
    w = weights()
    with deltacast.Producer(w, token=TOKEN) as p:
        assert p.progress() is None
        with deltacast.Consumer(weights(), connect=p.address, token=TOKEN) as c:  # commits only in pull()
            v = p.publish()
            seen = []
            puller = threading.Timer(1.2, lambda: c.pull(timeout=10))
            puller.start()
            p.wait(v, timeout=20, progress=seen.append, every=0.2)
            puller.join()
            assert c.version == v
            assert p.progress() is None, "the round ended with the wait"
    assert len(seen) >= 3, seen
    assert all(s["version"] == v and s["full"] and s["targets"] == 1 for s in seen), seen
    last = seen[-1]
    # Staged, not committed: the consumer holds every byte and waits for pull().
    assert last["staged"] == 1 and last["committed"] == 0, last
    assert last["received_bytes"] == last["bytes"] >= 512 * 256 * 2, last
    assert last["fraction"] == 1.0 and last["eta_seconds"] == 0.0, last
    assert all(a["seconds"] < b["seconds"] for a, b in zip(seen, seen[1:]))


def test_a_progress_that_is_not_callable_is_refused():
    with deltacast.Producer(weights(), token=TOKEN) as p:
        v = p.publish()
        with pytest.raises(deltacast.InvalidArgumentError, match="progress"):
            p.wait(v, timeout=1, progress="print")
