"""vLLM's plugin hook (entry point ``vllm.general_plugins``: ``deltacast``), run by vLLM in its
API server, engine-core and worker processes: registers the ``deltacast`` weight-transfer backend
with the worker-side and trainer-side factories. Lazy: the engines' modules are imported only
when a server or trainer selects the backend."""
BACKEND = "deltacast"
_PACKAGE = "deltacast.integrations.vllm"


def register():
    """Registers the backend; a no-op where vLLM has no weight-transfer factories or already has
    it."""
    try:
        from vllm.distributed.weight_transfer.factory import (WeightTransferEngineFactory,
                                                              WeightTransferTrainerFactory)
    except ImportError:  # a vLLM before pluggable weight transfer
        return False
    for factory, module, cls in ((WeightTransferEngineFactory, "worker_engine", "DeltacastWeightTransferEngine"),
                                 (WeightTransferTrainerFactory, "trainer_engine",
                                  "DeltacastTrainerWeightTransferEngine")):
        if BACKEND not in factory._registry:
            factory.register_engine(BACKEND, f"{_PACKAGE}.{module}", cls)
    return True
