"""What an update may change in a model, kept so a failed update can be undone: every module's
registered parameters and buffers and its other attributes (post-load processing leaves packed
weights in attributes, e.g. a GEMM closure over a repacked copy), and the bytes of the tensors
the update writes. Restoring puts the objects back as they were and copies the bytes back, so the
model computes exactly what it did before."""
import torch

_CONTAINERS = ("_parameters", "_buffers", "_modules")


class ModelState:
    """Taken before an update; `restore()` undoes it. `written`: the tensors (parameters and
    buffers, by object) whose bytes the update may change; their contents are copied to host
    memory (the tensors' `.data` binding is kept too: processing may rebind it)."""

    def __init__(self, model, written):
        self._modules = []
        for module in model.modules():
            attrs = {k: v for k, v in module.__dict__.items() if k not in _CONTAINERS}
            self._modules.append((module, attrs, dict(module._parameters), dict(module._buffers)))
        self._bytes = []
        seen = set()
        for tensor in written:
            if tensor is None or id(tensor) in seen:
                continue
            seen.add(id(tensor))
            data = tensor.data
            self._bytes.append((tensor, data, data.detach().to("cpu", copy=True)))

    @property
    def nbytes(self):
        return sum(saved.numel() * saved.element_size() for _, _, saved in self._bytes)

    @torch.no_grad()
    def restore(self):
        for module, attrs, params, buffers in self._modules:
            for k in [k for k in module.__dict__ if k not in _CONTAINERS and k not in attrs]:
                del module.__dict__[k]
            module.__dict__.update(attrs)
            module._parameters.clear()
            module._parameters.update(params)
            module._buffers.clear()
            module._buffers.update(buffers)
        for tensor, data, saved in self._bytes:
            if tensor.data is not data:
                tensor.data = data
            data.copy_(saved)
