"""An inference worker's receiver (deltacast.inference.ModelReceiver) against a real trainer rank
over loopback: a version the group has sent lands in the model only when the worker's update
applies it. Received and verified before that (staged), it changes no parameter, in place or
through the engine's loader; the update then makes every parameter what the engine's own loaders
make of that version's checkpoint. This is what lets an engine keep serving while the next
version arrives, and what "a worker's weights change only inside its update call" rests on."""
import os
import sys
import time

import pytest
import torch

import deltacast
from deltacast.group import Group, whole
from deltacast.inference.receiver import ModelReceiver, staged_in_time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fakes"))
from tiny_llama import TinyLlama, checkpoint_tensors  # noqa: E402

TOKEN = "receiver-test"


def trained(tensors, step):
    """A step's change: 2% of every tensor's elements nudged."""
    g = torch.Generator().manual_seed(100 + step)
    out = {}
    for name, t in tensors.items():
        flat = t.clone().view(-1)
        idx = torch.randperm(flat.numel(), generator=g)[: max(1, flat.numel() // 50)]
        flat[idx] = (flat[idx].float() + 0.05 * torch.randn(len(idx), generator=g)).to(flat.dtype)
        out[name] = flat.view(t.shape)
    return out


def reference(tensors, tp_rank, tp_size):
    """What the engine's own loaders make of `tensors` on this rank: the digests to hold a worker to."""
    model = TinyLlama(tp_rank, tp_size)
    model.load_weights(tensors.items())
    return model.digests()


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "through-the-loader"])
def test_a_staged_version_changes_no_parameter_until_the_update_applies_it(in_place):
    tp_rank, tp_size = 1, 2  # fused qkv_proj and gate_up_proj, a padded vocabulary split by rows
    steps = [checkpoint_tensors(seed=4)]
    for step in (1, 2):
        steps.append(trained(steps[-1], step))
    buffers = {n: t.clone() for n, t in steps[0].items()}
    group = Group({n: ("bf16", tuple(t.shape)) for n, t in buffers.items()})
    producer = deltacast.Producer(buffers, token=TOKEN, group=group, rank=0, world_size=1,
                                  shards={n: whole(n, tuple(t.shape)) for n, t in buffers.items()}, threads=1,
                                  coordinator="127.0.0.1:0")
    model = TinyLlama(tp_rank, tp_size)
    receiver = None
    try:
        receiver = ModelReceiver(model, producer.coordinator, token=TOKEN, name="worker", join_timeout=30,
                                 tp_rank=tp_rank, tp_size=tp_size, in_place=in_place)
        if in_place:
            assert receiver.plan.in_place, "nothing of the model is written in place: the test would not test that"
        assert receiver.plan.fallback, "nothing goes through the loader: the test would not test that"
        load = model.load_weights
        for version, tensors in enumerate(steps, start=1):
            for n, t in tensors.items():
                buffers[n].copy_(t)
            producer.publish(full=version == 1)
            before = model.digests()
            # Received, verified and staged on the worker's side...
            deadline = time.monotonic() + 30
            while not staged_in_time(receiver.consumer, version, deadline):
                time.sleep(0.005)
            time.sleep(0.3)  # ...and left a while, as an engine serving between updates would
            assert model.digests() == before, f"version {version} changed the model before its update"
            assert receiver.consumer.version == version - 1
            result = receiver.apply(version, time.monotonic() + 30, load=load)
            assert result["version"] == version and result["changed"]
            assert model.digests() == reference(tensors, tp_rank, tp_size), f"version {version} after its update"
            if version > 1:  # what reached the worker was the change, not the model again
                assert 0 < result["received_bytes"] < sum(t.numel() * 2 for t in tensors.values()) / 4
    finally:
        if receiver is not None:
            receiver.close()
        producer.close()
