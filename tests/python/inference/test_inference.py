"""The inference core's parts on their own (no engine): which parameters hold the checkpoint's
bytes (the probe of post-load processing), the rollback of a model's state, and the two-phase
agreement among an engine's workers (fake receivers in threads, as vLLM's workers in processes)."""
import threading

import pytest
import torch

from deltacast.errors import UpdateError
from deltacast.inference.holds import parameters_holding_checkpoint_bytes, transformed_modules
from deltacast.inference.receiver import apply_together, receiver_for
from deltacast.inference.rollback import ModelState


class Plain:
    """A quantization method whose processing leaves the layer alone (vLLM's unquantized linear on a GPU)."""

    def process_weights_after_loading(self, layer):
        pass


class Repack:
    """Repacks the weight and leaves the parameter empty (vLLM's CPU GEMM dispatch)."""

    def process_weights_after_loading(self, layer):
        if layer.weight.numel() == 0:
            raise ValueError("nothing to pack")
        packed = layer.weight.detach().t().contiguous()
        layer.weight = torch.nn.Parameter(torch.empty(0, dtype=layer.weight.dtype), requires_grad=False)
        layer.cpu_linear = lambda x: x @ packed


class KeepButDerive:
    """Keeps the weight but computes from a copy made at load (vLLM's CPU lm_head)."""

    def process_weights_after_loading(self, layer):
        packed = layer.weight.detach().clone()
        layer.cpu_linear = lambda x: x @ packed.t()


class Rescale:
    """Changes the weight's bytes in place (a requantization of the same shape)."""

    def process_weights_after_loading(self, layer):
        layer.weight.data.mul_(2)


def linear(method, rows=4, cols=3):
    layer = torch.nn.Linear(cols, rows, bias=False).to(torch.bfloat16)
    layer.weight.requires_grad_(False)
    layer.quant_method = method
    return layer


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(2), requires_grad=False)

    def process_weights_after_loading(self, dtype):
        pass


def model():
    m = torch.nn.Module()
    m.plain, m.repacked, m.derived, m.rescaled = linear(Plain()), linear(Repack()), linear(KeepButDerive()), \
        linear(Rescale())
    m.norm = torch.nn.LayerNorm(3).to(torch.bfloat16)
    m.attn = Attention()
    for name in ("repacked", "derived"):  # as vLLM left them after loading
        getattr(m, name).quant_method.process_weights_after_loading(getattr(m, name))
    return m


def test_the_probe_finds_the_layers_whose_processing_transforms_weights_and_touches_nothing():
    m = model()
    before = {n: (p, p.detach().clone()) for n, p in m.named_parameters()}
    attrs = {n: dict(mod.__dict__) for n, mod in m.named_modules()}
    assert transformed_modules(m) == {m.repacked, m.derived, m.rescaled, m.attn}
    assert sorted(parameters_holding_checkpoint_bytes(m)) == ["norm.bias", "norm.weight", "plain.weight"]
    for n, p in m.named_parameters():  # the probe ran on copies
        assert p is before[n][0] and torch.equal(p, before[n][1]), n
    for n, mod in m.named_modules():
        assert mod.__dict__.keys() == attrs[n].keys() and all(mod.__dict__[k] is v for k, v in attrs[n].items()), n


def bits(t):
    return t.detach().reshape(-1).view(torch.int16).clone()


def test_model_state_puts_back_objects_attributes_and_bits():
    m = model()
    special = torch.tensor([float("nan"), -0.0, 1e-40, float("inf")], dtype=torch.bfloat16)
    m.plain.weight.data.view(-1)[:4] = special  # NaN, -0.0, a denormal, inf: bits, not values
    params = {n: (p, bits(p)) for n, p in m.named_parameters()}
    closure, data = m.derived.cpu_linear, m.plain.weight.data
    state = ModelState(m, [p for p, _ in params.values()])
    # An update that rewrites bytes, rebinds .data, replaces a parameter and an attribute, adds one.
    m.plain.weight.data.fill_(3)
    m.norm.weight.data = torch.zeros(3, dtype=torch.bfloat16)
    m.rescaled.weight = torch.nn.Parameter(torch.zeros(4, 3, dtype=torch.bfloat16), requires_grad=False)
    m.derived.cpu_linear = lambda x: x
    m.derived.extra = 1
    state.restore()
    for n, p in m.named_parameters():
        assert p is params[n][0] and torch.equal(bits(p), params[n][1]), n
    assert m.plain.weight.data.data_ptr() == data.data_ptr()
    assert m.derived.cpu_linear is closure and not hasattr(m.derived, "extra")
    assert state.nbytes == sum(p.numel() * p.element_size() for p, _ in params.values())


class FakeReceiver:
    """What apply_together drives: prepare, land, undo, forget (a receiver's two phases)."""

    def __init__(self, fail_prepare=False, fail_land=False):
        self.fail_prepare, self.fail_land = fail_prepare, fail_land
        self.landed = self.undone = False

    def prepare(self, version, deadline):
        if self.fail_prepare:
            raise TimeoutError("version never came")
        return version

    def land(self, version, deadline, load):
        self.landed = True
        if self.fail_land:
            raise RuntimeError("the loader refused 'lm_head.weight'")
        return {"version": version}

    def undo(self):
        self.undone = self.landed
        return True

    def forget(self):
        pass

    def _result(self, start, changed=True):
        return {"changed": changed}


def run_workers(receivers):
    """Each receiver in a thread of its own; agree() gives every worker every worker's value, in
    worker order (a barrier before writing, so that nobody overwrites a round still being read)."""
    count = len(receivers)
    barrier, slots = threading.Barrier(count, timeout=10), [None] * count

    def agree_for(index):
        def agree(name, value):
            barrier.wait()
            slots[index] = (name, value)
            barrier.wait()
            return list(slots)
        return agree

    outcomes = [None] * count

    def work(i):
        try:
            outcomes[i] = apply_together(lambda: receivers[i], 7, 0, None, agree_for(i), f"worker {i} of {count}")
        except Exception as e:
            outcomes[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return outcomes


def test_no_worker_writes_unless_every_worker_holds_the_version():
    receivers = [FakeReceiver(), FakeReceiver(fail_prepare=True)]
    outcomes = run_workers(receivers)
    assert all(isinstance(o, UpdateError) and "nothing written anywhere" in str(o) and "worker 1 of 2" in str(o)
               for o in outcomes), outcomes
    assert not any(r.landed for r in receivers)


def test_a_worker_failing_to_load_makes_every_worker_put_back_what_it_wrote():
    receivers = [FakeReceiver(), FakeReceiver(fail_land=True)]
    outcomes = run_workers(receivers)
    assert all(isinstance(o, UpdateError) and "put back" in str(o) and "lm_head.weight" in str(o) for o in outcomes)
    assert [r.undone for r in receivers] == [True, True]


def test_every_worker_applies_when_all_can():
    receivers = [FakeReceiver(), FakeReceiver(), FakeReceiver()]
    assert run_workers(receivers) == [{"version": 7}] * 3
    assert not any(r.undone for r in receivers)


def broken_after(calls):
    """An agree() whose exchange breaks at its `calls`-th call, as a process group's does when a
    peer worker died (the others' connections close)."""
    count = [0]

    def agree(name, value):
        count[0] += 1
        if count[0] >= calls:
            raise RuntimeError("Connection closed by peer [127.0.0.1]:29500")
        return [(name, value), ("worker 1 of 2", value)]  # the other worker: the same outcome

    return agree


@pytest.mark.parametrize("calls", [1, 2])
def test_a_worker_dying_before_anyone_writes_fails_the_update_with_nothing_written(calls):
    receiver = FakeReceiver()
    with pytest.raises(UpdateError, match="nothing written anywhere.*exchange between workers broke.*closed by peer"):
        apply_together(lambda: receiver, 7, 0, None, broken_after(calls), "worker 0 of 2")
    assert not receiver.landed


def test_a_worker_dying_after_this_one_wrote_makes_it_put_back_what_it_wrote():
    receiver = FakeReceiver()
    with pytest.raises(UpdateError, match="this worker put back what it wrote.*exchange between workers broke"):
        apply_together(lambda: receiver, 7, 0, None, broken_after(3), "worker 0 of 2")
    assert receiver.landed and receiver.undone


@pytest.mark.parametrize("values", [[1.5, -0.0], [float("nan"), 2.0]])
def test_the_probe_compares_bits_not_values(values):
    layer = linear(Plain(), rows=1, cols=2)
    layer.weight.data[0] = torch.tensor(values, dtype=torch.bfloat16)
    assert transformed_modules(layer) == set()  # NaN equals itself here, -0.0 is not 0.0's bits but is unchanged


class _KeptReceiver:
    """What receiver_for reads of a ModelReceiver: its group, its settings, whether the model moved."""

    def __init__(self, group, settings, stale=False):
        self.group, self.settings, self._stale, self.closed = group, settings, stale, False

    def stale(self, model):
        return self._stale

    def close(self):
        self.closed = True


@pytest.mark.parametrize("change", ["nothing", "group", "coordinator", "in_place", "rollback", "encrypt", "model"])
def test_a_kept_receiver_serves_only_its_group_settings_and_model(change):
    made = []

    def make():
        made.append(_KeptReceiver(("c:1", "g"), (True, True, False)))
        return made[-1]

    holder = {}
    first = receiver_for(holder, "model", object(), "c:1", "g", make, (True, True, False))
    first._stale = change == "model"
    ask = {"coordinator": "c:2" if change == "coordinator" else "c:1", "group": "h" if change == "group" else "g",
           "settings": (change != "in_place", change != "rollback", change == "encrypt")}
    again = receiver_for(holder, "model", object(), ask["coordinator"], ask["group"], make, ask["settings"])
    if change == "nothing":
        assert again is first and len(made) == 1 and not first.closed
    else:
        assert again is not first and len(made) == 2 and first.closed and holder["model"] is again
