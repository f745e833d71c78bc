"""Which of a model's parameters still hold the checkpoint's bytes after the inference engine's
post-load processing, decided from what the model holds, not from a list of names.

Engines process weights once loaded: vLLM on a CPU repacks every linear layer's weight for its
GEMM (the parameter is left empty, or kept while a packed copy does the work); quantized models
(FP8, AWQ, ...) are requantized or repacked on GPUs too. Writing the checkpoint's bytes into such
a parameter would change nothing the model computes, or break it. A parameter is taken in place
only when its module runs no post-load processing, or when re-running that processing on a copy
of the module changes nothing: the same tensors, bytes and attributes come out. Everything else
goes through the engine's own loading path (vLLM's layerwise reload), which processes it again."""
import torch

_CONTAINERS = ("_parameters", "_buffers", "_modules")


def _copy_tensor(tensor):
    """A copy of `tensor` with its class and attributes (weight_loader, output_dim...) kept."""
    copy = tensor.detach().clone()
    copy.__class__ = tensor.__class__
    copy.__dict__ = dict(tensor.__dict__)
    return copy


def _same_bytes(a, b):
    """Bit-for-bit equality (NaN equals itself here, as it must for weights)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.detach().reshape(-1).view(torch.uint8), b.detach().reshape(-1).view(torch.uint8))


def _processing_leaves_alone(module, method):
    """Whether `method.process_weights_after_loading` changes nothing of `module`: run on a twin
    whose tensors are copies, so the real module is never touched."""
    twin = object.__new__(type(module))
    twin.__dict__ = dict(module.__dict__)
    copies = {k: (_copy_tensor(v) if v is not None else None) for k, v in module._parameters.items()}
    twin._parameters = dict(copies)
    twin._buffers = {k: (v.clone() if v is not None else None) for k, v in module._buffers.items()}
    twin._modules = dict(module._modules)
    before = {k: v for k, v in twin.__dict__.items() if k not in _CONTAINERS}
    pointers = {k: (v.data_ptr(), v.dtype, tuple(v.shape)) for k, v in copies.items() if v is not None}
    try:
        method.process_weights_after_loading(twin)
    except Exception:  # processing that cannot run twice transforms what it is given
        return False
    if set(twin._parameters) != set(copies) or any(twin._parameters[k] is not v for k, v in copies.items()):
        return False
    for k, v in copies.items():
        if v is None:
            continue
        if (v.data_ptr(), v.dtype, tuple(v.shape)) != pointers[k] or not _same_bytes(v, module._parameters[k]):
            return False
    after = {k: v for k, v in twin.__dict__.items() if k not in _CONTAINERS}
    return after.keys() == before.keys() and all(after[k] is before[k] for k in before)


def transformed_modules(model):
    """The modules (by object) whose parameters post-load processing transforms: those with a
    quantization method whose processing is not the identity on them, and those that process
    their own weights (attention layers)."""
    out = set()
    for module in model.modules():
        if not any(True for _ in module.parameters(recurse=False)):
            continue
        method = getattr(module, "quant_method", None)
        if method is None:
            if callable(getattr(module, "process_weights_after_loading", None)):
                out.add(module)
            continue
        if callable(getattr(method, "process_weights_after_loading", None)) and \
                not _processing_leaves_alone(module, method):
            out.add(module)
    return out


def parameter_owners(model):
    """{parameter name: the module that registers it}."""
    owners = {}
    for module_name, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            owners[f"{module_name}.{name}" if module_name else name] = module
    return owners


def parameters_holding_checkpoint_bytes(model):
    """{name: parameter} of `model`'s parameters whose module leaves them as loaded."""
    transformed = transformed_modules(model)
    owners = parameter_owners(model)
    return {n: p for n, p in model.named_parameters() if owners.get(n) not in transformed}
