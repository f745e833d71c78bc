"""Both APIs across real processes: a trainer (this process) trains a small
bf16 model with AdamW and publishes every step; consumer processes receive in
pull and background mode, join late, are killed and restarted. Exactness is
checked every step by the producer's hash check and at the end byte for byte."""
import torch

import deltacast

from conftest import raw_bytes

TOKEN = "process-test"


class Trainer:
    def __init__(self, seed=0):
        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
        self.model.to(torch.bfloat16)
        # A small learning rate, as in RL fine-tuning: a bf16 step then changes a few percent of the weights
        # (at 1e-3 recent torch versions change every element, which would test nothing sparse).
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5)

    def step(self):
        x = torch.randn(32, 64, dtype=torch.bfloat16)
        loss = (self.model(x) - x).pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    def spec(self):
        return [[n, str(p.dtype).replace("torch.", ""), list(p.shape)] for n, p in self.model.named_parameters()]

    def named(self):
        return dict(self.model.named_parameters())


def assert_same(trainer, path):
    received = torch.load(path)
    for name, p in trainer.named().items():
        assert raw_bytes(received[name]) == raw_bytes(p), name


def test_twenty_adamw_steps_bit_exact_in_pull_and_background_mode(consumers, tmp_path):
    trainer = Trainer()
    # Trees 2 wide over the two consumers, each on a node of its own: each takes one stripe from
    # the producer and forwards it to the other.
    with deltacast.Producer(trainer.named(), token=TOKEN, shape="trees:2") as p:
        puller = consumers(p.address, TOKEN, trainer.spec(), mode="pull", name="puller", out=str(tmp_path / "a.pt"))
        background = consumers(p.address, TOKEN, trainer.spec(), mode="background", name="bg",
                               out=str(tmp_path / "b.pt"))
        puller.expect("joined")
        background.expect("joined")
        p.wait_for_consumers(2, timeout=30)
        densities = []
        for step in range(20):
            if step > 0:
                trainer.step()
            v = p.publish()
            puller.send({"cmd": "pull"})
            assert puller.expect("committed")["version"] == v
            assert background.expect("committed")["version"] == v
            p.wait(v, timeout=30)
            check = p.check(v, timeout=30)
            assert check["all_exact"] and len(check["members"]) == 2, check
            report = p.report(v)
            assert report["full"] == (step == 0)
            assert report["shape"] == "trees:2", report
            assert report["why_not"] == {}, report  # names whoever did not commit, and why
            densities.append(report["density"])
        assert max(densities[1:]) < 1.0 and min(densities[1:]) > 0.0
        puller.finish()
        background.finish()
    assert_same(trainer, tmp_path / "a.pt")
    assert_same(trainer, tmp_path / "b.pt")


def test_a_late_consumer_gets_a_full_sync_and_a_killed_one_catches_up_after_restart(consumers, tmp_path):
    trainer = Trainer(seed=1)
    with deltacast.Producer(trainer.named(), token=TOKEN) as p:
        first = consumers(p.address, TOKEN, trainer.spec(), mode="background", name="first", out=str(tmp_path / "f.pt"))
        victim = consumers(p.address, TOKEN, trainer.spec(), mode="background", name="victim")
        first.expect("joined")
        victim.expect("joined")
        p.wait_for_consumers(2, timeout=30)
        for step in range(4):
            trainer.step()
            v = p.publish()
            p.wait(v, timeout=30)
        victim.kill()  # SIGKILL: no goodbye
        for step in range(3):
            trainer.step()
            v = p.publish()
            p.wait(v, timeout=30)  # the others are not held up by the dead one
        assert first.expect("committed")["version"] >= 1
        late = consumers(p.address, TOKEN, trainer.spec(), mode="background", name="late", out=str(tmp_path / "l.pt"))
        restarted = consumers(p.address, TOKEN, trainer.spec(), mode="background", name="victim",
                              out=str(tmp_path / "r.pt"))
        late.expect("joined")
        restarted.expect("joined")
        # Nothing new was published: the newcomers are caught up with a full sync of the newest version.
        assert late.expect("committed")["version"] == v
        assert restarted.expect("committed")["version"] == v
        trainer.step()
        v = p.publish()
        p.wait(v, timeout=30)
        check = p.check(v, timeout=30)
        assert check["all_exact"] and len(check["members"]) == 3, check
        assert p.stats()["full_syncs"] >= 1
        for c in (first, late, restarted):
            c.finish()
    for name in ("f", "l", "r"):
        assert_same(trainer, tmp_path / f"{name}.pt")
