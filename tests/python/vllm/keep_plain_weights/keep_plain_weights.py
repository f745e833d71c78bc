"""A test-only vLLM plugin (on PYTHONPATH only where a test wants it): vLLM's CPU backend keeps
its linear and embedding layers' plain weights instead of repacking them for its GEMM kernels, as
vLLM does on GPUs for unquantized models. Then every parameter holds the checkpoint's bytes and
deltacast's in-place path is exercised on this CPU."""


def register():
    import torch
    from vllm.model_executor.layers import linear, vocab_parallel_embedding

    def keep_plain(self, layer):
        layer.cpu_linear = torch.nn.functional.linear  # vLLM's own GEMM for layers it does not pack

    linear.UnquantizedLinearMethod.process_weights_after_loading = keep_plain
    vocab_parallel_embedding.UnquantizedEmbeddingMethod.process_weights_after_loading = keep_plain
