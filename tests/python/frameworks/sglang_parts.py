"""What test_sglang runs in a process of its own (SGLang's distributed state and published config
are per process): SGLang 0.5's own Llama model class on this CPU, set up as SGLang's model runner
sets it up (its config published, a gloo world of one, model-parallel groups), loaded through
SGLang's DefaultModelLoader (load_weights, then post-load processing); a trainer publishing the
tiny Llama's steps as a deltacast group; the deltacast loader called as SGLang calls a custom
loader (loader(model, named_tensors)). What the scenarios saw is printed as one JSON line."""
import json
import socket
import sys
import tempfile
import time

import torch

import deltacast
import tiny_model
from deltacast._dtypes import deltacast_dtype_of_torch
from deltacast.errors import UpdateError
from deltacast.group import whole
from deltacast.integrations import sglang as loader

TOKEN = "sglang-test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sglang(rank=0, size=1, port=None):
    """SGLang's process state for tensor-parallel worker `rank` of `size` (their gloo world meets
    at `port`), serving the tiny Llama (its checkpoint directory: SGLang reads the model's config
    from it)."""
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel, parallel_state
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import ServerArgs
    checkpoint = tiny_model.save(tempfile.mkdtemp(prefix="sglang-tiny-"), tiny_model.checkpoint_tensors())
    publish(ServerArgs(model_path=checkpoint, device="cpu", tp_size=size), role="test",
            ranks=SpawnRanks(world_rank=rank))
    init_distributed_environment(world_size=size, rank=rank, local_rank=rank,
                                 distributed_init_method=f"tcp://127.0.0.1:{port or free_port()}", backend="gloo")
    if size > 1:
        # SGLang's default platform gives every group of several workers an NCCL communicator,
        # which needs a GPU; its CPU platform needs sgl-kernel's CPU build, not on PyPI. The TP
        # group's process group (gloo), which the loader's workers agree over, is SGLang's own.
        make_group = parallel_state.init_model_parallel_group
        parallel_state.init_model_parallel_group = lambda *a, **kw: make_group(*a, **dict(kw, use_pynccl=False))
    initialize_model_parallel(backend="gloo")


def sglang_model(tensors):
    """SGLang's LlamaForCausalLM holding `tensors` (Hugging Face names), loaded as SGLang loads a
    checkpoint."""
    from sglang.srt.model_loader.loader import DefaultModelLoader
    from sglang.srt.models.llama import LlamaForCausalLM
    from transformers import LlamaConfig
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = LlamaForCausalLM(LlamaConfig(**tiny_model.CONFIG, torch_dtype="bfloat16"))
    finally:
        torch.set_default_dtype(torch.float32)
    DefaultModelLoader.load_weights_and_postprocess(model, iter(tensors.items()), torch.device("cpu"))
    return model


def bits(model):
    return {n: p.detach().clone().reshape(-1).view(torch.uint8) for n, p in model.named_parameters()}


def differing(model, expected_bits):
    """Names of the parameters whose bytes are not `expected_bits`'."""
    now = bits(model)
    return sorted(n for n in expected_bits if not torch.equal(now[n], expected_bits[n]))


class Trainer:
    """One trainer rank publishing the tiny Llama's tensors as a deltacast group (it hosts the
    group's coordinator)."""

    def __init__(self, tensors):
        self.buffers = {n: t.clone() for n, t in tensors.items()}
        group = deltacast.Group({n: (deltacast_dtype_of_torch(t.dtype), tuple(t.shape)) for n, t in tensors.items()})
        self.coordinator = f"127.0.0.1:{free_port()}"
        self.producer = deltacast.Producer(list(self.buffers.items()), token=TOKEN, group=group, rank=0, world_size=1,
                                           shards={n: whole(n, tuple(t.shape)) for n, t in tensors.items()},
                                           coordinator=self.coordinator)

    def publish(self, tensors, version):
        for name, tensor in tensors.items():
            self.buffers[name].copy_(tensor)
        self.producer.publish(version=version)

    def close(self):
        self.producer.close()


def request(trainer, version, **kwargs):
    return loader.update_request(trainer.coordinator, version, token=TOKEN, **kwargs)


def syncs(count=5):
    """Versions 1..count (steps of training), each applied by the loader and compared bit for bit
    with a fresh SGLang model loaded with that step's checkpoint."""
    steps = tiny_model.step_tensors(count + 1)
    model = sglang_model(steps[0])
    trainer = Trainer(steps[0])
    dense = sum(t.numel() * t.element_size() for t in steps[0].values())
    rows = []
    try:
        for version in range(1, count + 1):
            trainer.publish(steps[version], version)
            started = time.monotonic()
            result = loader.load(model, request(trainer, version, timeout=120))
            seconds = time.monotonic() - started
            wrong = differing(model, bits(sglang_model(steps[version])))
            rows.append({"version": version, "wrong": wrong, "received_bytes": result["received_bytes"],
                         "in_place": result["in_place"], "loaded": result["loaded"], "seconds": seconds,
                         "held": result["version"]})
        in_place = sorted(loader._receivers["model"].plan.in_place)
        return {"rows": rows, "dense": dense, "in_place_names": in_place,
                "parameters": sorted(n for n, _ in model.named_parameters())}
    finally:
        loader.close()
        trainer.close()


def failures():
    """A request for a version never published times out having written nothing; a load_weights
    that fails after writing leaves every parameter as it was; a request that is not deltacast's
    is refused naming what is wrong; after each, the next version applies exact."""
    steps = tiny_model.step_tensors(4)
    model = sglang_model(steps[0])
    trainer = Trainer(steps[0])
    out = {}
    try:
        trainer.publish(steps[1], 1)
        loader.load(model, request(trainer, 1, timeout=120))
        before = bits(model)
        try:
            loader.load(model, request(trainer, 7, timeout=2))
            out["unpublished"] = "applied"
        except UpdateError as e:
            out["unpublished"] = str(e)
        out["unpublished_wrote"] = differing(model, before)

        # Everything through load_weights (in_place=False), which fails half way through: some
        # tensors written, then an error.
        trainer.publish(steps[2], 2)
        real_load = model.load_weights

        def failing_load(weights):
            weights = list(weights)
            real_load(weights[: len(weights) // 2])
            raise RuntimeError("load_weights refused a tensor (injected)")

        model.load_weights = failing_load
        try:
            loader.load(model, request(trainer, 2, timeout=120, in_place=False))
            out["failed_load"] = "applied"
        except UpdateError as e:
            out["failed_load"] = str(e)
        finally:
            del model.load_weights
        out["failed_load_wrote"] = differing(model, before)
        out["after_failed_load"] = differing(model, bits(sglang_model(steps[1])))

        loader.load(model, request(trainer, 2, timeout=120))
        out["retry_wrong"] = differing(model, bits(sglang_model(steps[2])))

        for what, named in (("no_spec", [("model.norm.weight", steps[0]["model.norm.weight"])]),
                            ("garbage", [(loader.SPEC_NAME, torch.tensor([1, 2, 3], dtype=torch.uint8))]),
                            ("weights_along", request(trainer, 3) + [("lm_head.weight", steps[0]["lm_head.weight"])])):
            try:
                loader.load(model, named)
                out[what] = "accepted"
            except deltacast.InvalidArgumentError as e:
                out[what] = str(e)
        trainer.publish(steps[3], 3)
        loader.load(model, request(trainer, 3, timeout=120))
        out["last_wrong"] = differing(model, bits(sglang_model(steps[3])))
        return out
    finally:
        loader.close()
        trainer.close()


def tp_worker(rank, size, port, coordinator):
    """Tensor-parallel worker `rank` of `size`: holds its share of SGLang's Llama and applies the
    versions it is told to on stdin ("load V"), each answered with one JSON line: the error, or
    which parameters are not what SGLang loads from step V's checkpoint."""
    steps = tiny_model.step_tensors(6)
    model = sglang_model(steps[0])
    print(json.dumps({"ready": rank}), flush=True)
    for line in sys.stdin:
        version = int(line.split()[1])
        before = bits(model)
        try:
            result = loader.load(model, loader.update_request(coordinator, version, token=TOKEN, timeout=120))
            answer = {"version": version, "error": None, "in_place": result["in_place"],
                      "wrong": differing(model, bits(sglang_model(steps[version])))}
        except UpdateError as e:
            answer = {"version": version, "error": str(e), "wrote": differing(model, before)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "tp_worker":
        rank, size, port = (int(a) for a in sys.argv[2:5])
        start_sglang(rank, size, port)
        tp_worker(rank, size, port, sys.argv[5])
    else:  # scenarios, comma-separated, one after the other in this process
        start_sglang()
        print(json.dumps({name: globals()[name]() for name in sys.argv[1].split(",")}), flush=True)
