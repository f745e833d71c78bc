"""How staged checkpoint tensors enter a vLLM model: through vLLM's layerwise reload
(vllm.model_executor.model_loader.reload), which restores each layer to checkpoint format, runs
the model's own weight loaders (tensor-parallel sharding, fused qkv / gate_up) and then the
layer's post-load processing (repacking, quantization) into the layer's original storage. On a
vLLM without it: the model's load_weights, then its post-load processing.

Every shard of a fused parameter must come in one call (the layer is processed once all its
elements are loaded), which is why the receiver hands over every staged tensor each update."""
import logging

from ...inference.agreement import alone, over_process_group

_LAYERWISE_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


class _QuietUnloaded(logging.Filter):
    """Layers written in place are not loaded by the reload, which would warn about each of them
    on every update; those warnings say nothing here."""

    def filter(self, record):
        return "Failed to load weights" not in str(record.msg)


def loader_for(model, model_config, device=None):
    """A ``load(list of (name, tensor))`` that takes checkpoint tensors into `model`."""
    try:
        from vllm.model_executor.model_loader import reload as layerwise
    except ImportError:
        return _load_then_process(model, model_config, device)

    def load(weights):
        quiet = _QuietUnloaded()
        logger = logging.getLogger(_LAYERWISE_LOGGER)
        logger.addFilter(quiet)
        tracked = _Tracked(weights)
        try:
            layerwise.initialize_layerwise_reload(model)
            try:
                model.load_weights(tracked)
                layerwise.finalize_layerwise_reload(model, model_config)
            except BaseException as e:
                _forget_layerwise_state(model)
                raise tracked.refused(e) from e
        finally:
            logger.removeFilter(quiet)

    return load


class _Tracked:
    """The weights handed to a model's load_weights, remembering the one being loaded, so that a
    loader's bare assertion becomes an error naming the tensor."""

    def __init__(self, weights):
        self._weights = list(weights)
        self.current = None

    def __iter__(self):
        for name, tensor in self._weights:
            self.current = (name, tensor)
            yield name, tensor
        self.current = None

    def refused(self, error):
        detail = f"{type(error).__name__}: {error}".rstrip(": ")
        if self.current is None:
            return RuntimeError(f"vLLM's weight loading failed: {detail}")
        name, tensor = self.current
        return RuntimeError(f"vLLM's loader refused checkpoint tensor '{name}' ({str(tensor.dtype).replace('torch.', '')} "
                            f"{list(tensor.shape)}): {detail}")


def _forget_layerwise_state(model):
    """Drops what a failed layerwise reload left in vLLM's per-layer records (buffered weights,
    kernel tensors); the model's own modules are put back by the receiver's rollback."""
    from vllm.model_executor.model_loader.reload import layerwise
    for module in model.modules():
        info = layerwise.LAYERWISE_INFO.get(module)
        if info is not None:
            info.reset()
    layerwise.LOADING_LAYERS.clear()
    if hasattr(model, "_original_do_torchao_reload"):
        model._do_torchao_reload = model._original_do_torchao_reload


def _load_then_process(model, model_config, device):
    def load(weights):
        tracked = _Tracked(weights)
        try:
            model.load_weights(tracked)
        except BaseException as e:
            raise tracked.refused(e) from e
        try:
            from vllm.model_executor.model_loader.utils import process_weights_after_loading
        except ImportError:
            return
        process_weights_after_loading(model, model_config, device)

    return load


def tensor_parallel():
    """(rank, size) of this worker's tensor-parallel group in vLLM; (0, 1) outside it."""
    try:
        from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
        return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
    except (ImportError, AssertionError, AttributeError):
        return 0, 1


def worker_place():
    """(index, count) of this worker among the engine's workers (its world group)."""
    try:
        from vllm.distributed import get_world_group
        group = get_world_group()
        return group.rank_in_group, group.world_size
    except (ImportError, AssertionError, AttributeError):
        return 0, 1


def workers_agree():
    """``agree(name, value)`` over this engine's workers (vLLM's world group, through its CPU
    process group): every worker's (name, value), in worker order. One worker: just its own."""
    try:
        from vllm.distributed import get_world_group
        group = get_world_group()
    except (ImportError, AssertionError, AttributeError):
        return alone
    return over_process_group(group.cpu_group, group.world_size)


def raise_where_vllm_reads_it(error, place):
    """After an update failed on this engine's workers (every worker knows, they agreed), only the
    last worker raises: vLLM's executor reads its workers' answers in order and stops at the first
    failure, so a failure raised by an earlier worker would leave the later workers' answers
    queued, to be taken for the answers of the next call. The others return; every worker has
    reported its own outcome to the trainer."""
    index, count = place
    if index == count - 1:
        raise error
