"""deltacast on GPU tensors across real processes, on one GPU: a trainer (this process) trains a
real transformer from the `transformers` package in bf16 on the GPU with AdamW and publishes its
CUDA parameters every step; rollout processes hold the parameters on the GPU as torch tensors and
as CuPy arrays (both through DLPack) and commit on streams of their own. Every version is checked
exact by the producer's hash check and by a sha256 of the bytes each worker reads back; a worker
is SIGKILLed mid-version and restarted; a host-memory consumer in this process rides along.
Run through run_gpu_tests.py (exit 77 without a GPU), or directly with pytest on a GPU machine."""
import hashlib
import os
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
transformers = pytest.importorskip("transformers")
pytest.importorskip("cupy")

import deltacast  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from conftest import ConsumerProcess  # noqa: E402

TOKEN = "gpu-test"
WORKER = os.path.join(HERE, "gpu_worker.py")
# A small Llama (about 14 M parameters): the real architecture, sized for a test.
CONFIG = dict(vocab_size=8192, hidden_size=384, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=6,
              num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)


class Trainer:
    def __init__(self, seed=0):
        torch.manual_seed(seed)
        config = transformers.LlamaConfig(**CONFIG)
        self.model = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16)
        # An RL fine-tuning learning rate: a bf16 step changes a few percent of the weights.
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5)

    def step(self):
        tokens = torch.randint(0, CONFIG["vocab_size"], (4, 128), device="cuda")
        loss = self.model(input_ids=tokens, labels=tokens).loss
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        torch.cuda.synchronize()

    def named(self):
        return dict(self.model.named_parameters())

    def spec(self):
        return [[n, "bfloat16", list(p.shape)] for n, p in self.model.named_parameters()]

    def sha(self):
        h = hashlib.sha256()
        for p in self.model.parameters():
            h.update(p.detach().view(torch.int16).cpu().numpy().tobytes())
        return h.hexdigest()


def worker(address, spec, name, kind):
    return ConsumerProcess(address, TOKEN, spec, mode="background", name=name, script=WORKER, extra=("--kind", kind))


def expect_version(proc, version, sha):
    """Reads the worker's commits up to `version`: it must commit it, with the trainer's bytes."""
    while True:
        message = proc.expect("committed", timeout=120)
        if message["version"] == version:
            assert message["sha"] == sha, f"{proc}: version {version} differs from the trainer's bytes"
            return message
        assert message["version"] < version, message


def test_twenty_adamw_steps_of_a_transformer_on_the_gpu_exact_across_processes_with_a_kill():
    trainer = Trainer()
    host_copy = {n: torch.empty(p.shape, dtype=p.dtype) for n, p in trainer.named().items()}
    with deltacast.Producer(trainer.named(), token=TOKEN, stream=torch.cuda.current_stream()) as producer:
        spec = trainer.spec()
        on_torch = worker(producer.address, spec, "torch-worker", "torch")
        on_cupy = worker(producer.address, spec, "cupy-worker", "cupy")
        on_torch.expect("joined")
        on_cupy.expect("joined")
        with deltacast.Consumer(host_copy, connect=producer.address, token=TOKEN, name="host") as on_host:
            on_host.start()
            producer.wait_for_consumers(3, timeout=60)
            densities = []
            for step in range(21):
                if step > 0:
                    trainer.step()
                version = producer.publish()
                sha = trainer.sha()
                if step == 10:
                    on_cupy.kill()  # SIGKILL right after publish: the version is on its way to it
                    on_cupy = worker(producer.address, spec, "cupy-worker", "cupy")
                    on_cupy.expect("joined")
                producer.wait(version, timeout=120)
                expect_version(on_torch, version, sha)
                expect_version(on_cupy, version, sha)  # the restarted worker caught up
                check = producer.check(version, timeout=60)
                assert check["all_exact"] and len(check["members"]) == 3, check
                assert on_host.version == version
                for name, p in trainer.named().items():
                    assert torch.equal(host_copy[name].view(torch.int16), p.detach().view(torch.int16).cpu()), name
                report = producer.report(version)
                assert report["full"] == (step == 0)
                densities.append(report["density"])
            assert 0.0 < min(densities[1:]) and max(densities[1:]) < 0.5, densities
            assert producer.stats()["full_syncs"] >= 1  # the restarted worker's catch-up
        on_torch.finish()
        on_cupy.finish()


@pytest.mark.parametrize("where", ["host", "gpu-host-shadow"])
def test_a_host_producer_or_one_with_its_shadow_on_the_host_feeds_a_gpu_worker(where):
    """Host tensors in, GPU tensors out; and GPU tensors diffed against a shadow in host memory."""
    torch.manual_seed(3)
    device = "cpu" if where == "host" else "cuda"
    tensors = {"w": torch.randn(1000, 64).to(torch.bfloat16).to(device),
               "b": torch.randn(64).to(torch.bfloat16).to(device)}
    shadow = "device" if where == "host" else "host"
    with deltacast.Producer(tensors, token=TOKEN, shadow=shadow) as producer:
        spec = [[n, "bfloat16", list(t.shape)] for n, t in tensors.items()]
        gpu = worker(producer.address, spec, "gpu", "torch")
        gpu.expect("joined")
        producer.wait_for_consumers(1, timeout=60)
        for step in range(4):
            if step > 0:
                tensors["w"][step * 10:step * 10 + 40] += 1
            version = producer.publish()
            h = hashlib.sha256()
            for t in tensors.values():
                h.update(t.view(torch.int16).cpu().numpy().tobytes())
            producer.wait(version, timeout=60)
            expect_version(gpu, version, h.hexdigest())
            assert producer.check(version, timeout=60)["all_exact"]
        gpu.finish()


def test_bad_placements_and_arguments_name_the_tensor_or_argument():
    mixed = {"w": torch.zeros(4, device="cuda", dtype=torch.bfloat16), "b": torch.zeros(4, dtype=torch.bfloat16)}
    with pytest.raises(deltacast.InvalidArgumentError, match="'b' is in host memory"):
        deltacast.Consumer(mixed, connect="127.0.0.1:1", token=TOKEN)
    with pytest.raises(deltacast.InvalidArgumentError, match="'b' is in host memory"):
        deltacast.Producer(mixed, token=TOKEN)
    with pytest.raises(deltacast.InvalidArgumentError, match="stream"):
        deltacast.Producer({"w": mixed["w"]}, token=TOKEN, stream="default")
    with pytest.raises(deltacast.InvalidArgumentError, match="shadow 'hbm'"):
        deltacast.Producer({"w": mixed["w"]}, token=TOKEN, shadow="hbm")
