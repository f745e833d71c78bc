"""A tiny random Llama made at test time, as a Hugging Face checkpoint directory vLLM loads
(config.json, safetensors, a small tokenizer): no hub, no download. Steps of "training" change
about 1% of each tensor's elements, deterministically, so any process can recompute a step."""
import json
import os
import zlib

CONFIG = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-5, tie_word_embeddings=False)
WORDS = ["the", "a", "model", "weights", "change", "every", "step", "rollout", "trainer", "sync", "fast",
         "exact", "tensor", "rail", "node", "version", "delta", "commit", "apply", "in", "place", "of", "to"]


def checkpoint_tensors(seed=0, config=None):
    """The model's tensors, bf16, {Hugging Face name: tensor}."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**(config or CONFIG), torch_dtype="bfloat16"))
    with torch.no_grad():
        for p in model.parameters():  # init's scale (0.02) is too small to make distinct greedy tokens
            p.normal_(0.0, 0.5 if p.dim() > 1 else 0.1)
            if p.dim() == 1:
                p.add_(1.0)
    return {n: p.detach().to(torch.bfloat16).contiguous() for n, p in model.state_dict().items()
            if "rotary" not in n}


def trained(tensors, step, fraction=0.01):
    """What training step `step` leaves of `tensors`: about `fraction` of each tensor's elements
    moved (deterministic in the tensor's name and the step)."""
    import torch
    out = {}
    for name, tensor in tensors.items():
        g = torch.Generator().manual_seed(step * 1_000_003 + zlib.crc32(name.encode()))
        flat = tensor.detach().clone().reshape(-1)
        count = max(1, int(flat.numel() * fraction))
        index = torch.randperm(flat.numel(), generator=g)[:count]
        flat[index] = (flat[index].float() + 0.05 * torch.randn(count, generator=g)).to(flat.dtype)
        out[name] = flat.reshape(tensor.shape)
    return out


def step_tensors(steps, seed=0):
    """The tensors of steps 0..steps-1 (step 0: the checkpoint)."""
    tensors = [checkpoint_tensors(seed)]
    for step in range(1, steps):
        tensors.append(trained(tensors[-1], step))
    return tensors


def _tokenizer(directory):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    for i in range(CONFIG["vocab_size"] - len(vocab)):  # fill the vocabulary with made-up words
        vocab[f"w{i}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)


def save(directory, tensors, config=None):
    """Writes `tensors` as a checkpoint vLLM loads: two safetensors files, config, tokenizer."""
    from safetensors.torch import save_file
    os.makedirs(directory, exist_ok=True)
    names = list(tensors)
    index = {}
    for i in range(2):
        file = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({n: tensors[n] for n in names[i::2]}, os.path.join(directory, file), metadata={"format": "pt"})
        index.update({n: file for n in names[i::2]})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f)
    config = dict(config or CONFIG, architectures=["LlamaForCausalLM"], model_type="llama", torch_dtype="bfloat16",
                  bos_token_id=1, eos_token_id=2, hidden_act="silu", rope_theta=10000.0)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    _tokenizer(directory)
    return directory


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="writes the tiny model's checkpoint into DIR")
    parser.add_argument("directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default="{}", help="JSON: sizes over CONFIG")
    args = parser.parse_args()
    config = dict(CONFIG, **json.loads(args.config))
    save(args.directory, checkpoint_tensors(args.seed, config), config)
