"""A small Llama as vLLM holds it on one tensor-parallel rank: vLLM's
parameter names (qkv_proj and gate_up_proj fused, o_proj and down_proj by
columns, the vocabulary padded to a multiple of 64 and split by rows), its
packed_modules_mapping, and load_weights with vLLM's stacked-parameter mapping
and per-layer weight loaders (QKVParallelLinear, MergedColumnParallelLinear,
RowParallelLinear, VocabParallelEmbedding). The Hugging Face checkpoint's
tensors are what `checkpoint_tensors` makes."""
import hashlib

import torch

CONFIG = {"vocab": 100, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "intermediate": 128, "layers": 2}
STACKED = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
           (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]


def checkpoint_tensors(config=CONFIG, seed=0):
    """The model's Hugging Face tensors, bf16, {name: tensor}."""
    g = torch.Generator().manual_seed(seed)
    c = config
    h, d = c["hidden"], c["head_dim"]
    shapes = {"model.embed_tokens.weight": (c["vocab"], h), "model.norm.weight": (h,), "lm_head.weight": (c["vocab"], h)}
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (c["heads"] * d, h),
                       p + "self_attn.k_proj.weight": (c["kv_heads"] * d, h),
                       p + "self_attn.v_proj.weight": (c["kv_heads"] * d, h),
                       p + "self_attn.o_proj.weight": (h, c["heads"] * d),
                       p + "mlp.gate_proj.weight": (c["intermediate"], h),
                       p + "mlp.up_proj.weight": (c["intermediate"], h),
                       p + "mlp.down_proj.weight": (h, c["intermediate"]),
                       p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)})
    return {n: torch.randn(s, generator=g).to(torch.bfloat16) for n, s in shapes.items()}


def save_checkpoint(directory, tensors, files=2):
    """Writes `tensors` as `files` safetensors files in `directory` (tensors dealt round-robin, as
    a sharded Hugging Face checkpoint spreads them)."""
    import os

    from deltacast import safetensors_io
    names = list(tensors)
    for i in range(files):
        safetensors_io.save(os.path.join(str(directory), f"model-{i:05d}-of-{files:05d}.safetensors"),
                            {n: (tensors[n].view(torch.int16).numpy().view("uint16"), "bf16") for n in names[i::files]})


def step_digests(tensors, steps, trained, tp_size, config=CONFIG, device="cpu"):
    """Per step (the checkpoint, then `trained(tensors, step)` of the step before), per
    tensor-parallel rank: the digests of what vLLM's own loaders make of that step's checkpoint,
    the reference a worker's parameters are held to."""
    out = []
    for step in range(steps):
        if step:
            tensors = trained(tensors, step)
        ranks = []
        for rank in range(tp_size):
            model = TinyLlama(rank, tp_size, config, device)
            model.load_weights(tensors.items())
            ranks.append(model.digests())
        out.append(ranks)
    return out


def _parameter(shape, loader, device):
    p = torch.nn.Parameter(torch.zeros(shape, dtype=torch.bfloat16, device=device), requires_grad=False)
    p.weight_loader = loader
    return p


class TinyLlama(torch.nn.Module):
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self, tp_rank, tp_size, config=CONFIG, device="cpu"):
        super().__init__()
        c = self.config = config
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.processed_after_loading = 0
        self.fail_next_load = None
        h, d = c["hidden"], c["head_dim"]
        self.heads = c["heads"] // tp_size
        self.kv_replicas = max(1, tp_size // c["kv_heads"])
        self.kv_heads = max(1, c["kv_heads"] // tp_size)
        padded = (c["vocab"] + 63) // 64 * 64
        self.vocab_part = padded // tp_size
        self.params = torch.nn.ParameterDict()
        named = {"model.embed_tokens.weight": _parameter((self.vocab_part, h), self._vocab, device),
                 "model.norm.weight": _parameter((h,), self._whole, device),
                 "lm_head.weight": _parameter((self.vocab_part, h), self._vocab, device)}
        for i in range(c["layers"]):
            p = f"model.layers.{i}."
            named.update({
                p + "self_attn.qkv_proj.weight": _parameter(((self.heads + 2 * self.kv_heads) * d, h), self._qkv, device),
                p + "self_attn.o_proj.weight": _parameter((h, self.heads * d), self._columns, device),
                p + "mlp.gate_up_proj.weight": _parameter((2 * c["intermediate"] // tp_size, h), self._gate_up, device),
                p + "mlp.down_proj.weight": _parameter((h, c["intermediate"] // tp_size), self._columns, device),
                p + "input_layernorm.weight": _parameter((h,), self._whole, device),
                p + "post_attention_layernorm.weight": _parameter((h,), self._whole, device)})
        self._names = list(named)
        for name, param in named.items():
            self.params[name.replace(".", "__")] = param

    def named_parameters(self, *args, **kwargs):
        for name in self._names:
            yield name, self.params[name.replace(".", "__")]

    # The weight loaders, as vLLM's layers shard a checkpoint tensor for this rank.
    def _whole(self, param, loaded):
        param.data.copy_(loaded)

    def _columns(self, param, loaded):  # RowParallelLinear
        width = param.shape[1]
        param.data.copy_(loaded.narrow(1, self.tp_rank * width, width))

    def _vocab(self, param, loaded):  # VocabParallelEmbedding / ParallelLMHead
        start = self.tp_rank * self.vocab_part
        rows = max(0, min(self.vocab_part, loaded.shape[0] - start))
        param.data[:rows].copy_(loaded[start:start + rows])
        param.data[rows:].fill_(0)

    def _gate_up(self, param, loaded, shard_id):  # MergedColumnParallelLinear
        size = self.config["intermediate"] // self.tp_size
        param.data.narrow(0, shard_id * size, size).copy_(loaded.narrow(0, self.tp_rank * size, size))

    def _qkv(self, param, loaded, shard_id):  # QKVParallelLinear
        d = self.config["head_dim"]
        q, kv = self.heads * d, self.kv_heads * d
        offset, size = {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}[shard_id]
        shard = self.tp_rank if shard_id == "q" else self.tp_rank // self.kv_replicas
        param.data.narrow(0, offset, size).copy_(loaded.narrow(0, shard * size, size))

    def load_weights(self, weights):
        """vLLM's LlamaModel.load_weights loop: stacked parameters through their shard's loader,
        the rest through theirs; returns the names loaded."""
        if self.fail_next_load:
            message, self.fail_next_load = self.fail_next_load, None
            raise RuntimeError(message)
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            for param_name, shard_name, shard_id in STACKED:
                if shard_name in name:
                    target = name.replace(shard_name, param_name)
                    params[target].weight_loader(params[target], tensor, shard_id)
                    loaded.add(target)
                    break
            else:
                params[name].weight_loader(params[name], tensor)
                loaded.add(name)
        return loaded

    def digests(self):
        return {n: hashlib.sha256(p.detach().view(torch.int16).cpu().numpy().tobytes()).hexdigest()
                for n, p in self.named_parameters()}
