"""What TRL 1.16's AsyncGRPOTrainer needs a GPU for, done on this CPU, so that its real training
loop runs here: its tree-packed attention calls FlashAttention-3's varlen kernel (fetched from the
kernels hub, CUDA only), and its MFU metric asks CUDA for the device's name. Nothing of the weight
transfer is replaced: the trainer, its rollout worker, the vLLM server and deltacast are real."""
import torch
import torch.nn.functional as F


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                           causal=True, window_size=(-1, -1), softcap=None, **_):
    """FlashAttention's varlen attention in plain torch: q (tokens, heads, dim) and k, v (tokens,
    kv heads, dim), sequence i being rows cu_seqlens[i]:cu_seqlens[i + 1] of each; causal masks
    align to the bottom right (a query sees the keys up to its own place at the end of the keys),
    as the kernel's do."""
    if window_size != (-1, -1) or softcap:
        raise NotImplementedError("sliding windows and softcap: not needed by the test model")
    heads, kv_heads = q.shape[1], k.shape[1]
    out = []
    for i in range(len(cu_seqlens_q) - 1):
        qs = q[cu_seqlens_q[i]:cu_seqlens_q[i + 1]].transpose(0, 1)
        ks = k[cu_seqlens_k[i]:cu_seqlens_k[i + 1]].repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
        vs = v[cu_seqlens_k[i]:cu_seqlens_k[i + 1]].repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
        lq, lk = qs.shape[1], ks.shape[1]
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq) if causal else None
        out.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=softmax_scale).transpose(0, 1))
    return torch.cat(out)


class _Kernel:
    flash_attn_varlen_func = staticmethod(flash_attn_varlen_func)


def patch_trl_for_cpu():
    import trl.experimental.async_grpo.async_grpo_trainer as trainer
    import trl.experimental.async_grpo.packing as packing
    packing._flash_attn = lambda: _Kernel
    trainer.get_peak_flops_per_device = lambda accelerator, dtype: None  # MFU: not known for a CPU


def length_reward(completions, **kwargs):
    """A reward that differs between completions (so advantages, and so updates, are not zero):
    the completion's length in characters, tenths."""
    def text(completion):
        if isinstance(completion, str):
            return completion
        return " ".join(m["content"] for m in completion if isinstance(m.get("content"), str))
    return [len(text(c)) / 10 for c in completions]
