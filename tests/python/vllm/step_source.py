"""The trainer's weights for vLLM's trainer engines: one step's tensors at a time (a
WeightSource whose tensors the caller swaps between send_weights calls)."""
from vllm.distributed.weight_transfer import ParamMeta, WeightSource


class StepSource(WeightSource):
    def __init__(self, tensors):
        self.tensors = tensors

    def metadata(self):
        return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.tensors.items()]

    def __iter__(self):
        return iter(list(self.tensors.items()))
