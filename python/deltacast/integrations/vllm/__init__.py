"""deltacast as a vLLM weight-transfer backend named ``deltacast``.

Server (registered through vLLM's ``vllm.general_plugins`` entry point when deltacast is
installed; no vLLM change)::

    python -m vllm.entrypoints.openai.api_server --model ... \\
        --weight-transfer-config '{"backend": "deltacast"}'

Trainer (every rank)::

    from vllm.distributed.weight_transfer import (HTTPVLLMWeightSyncClient, ModuleSource,
                                                  WeightTransferTrainerFactory)
    from deltacast.integrations.vllm import DeltacastTrainerInitInfo

    engine = WeightTransferTrainerFactory.trainer_init(
        DeltacastTrainerInitInfo(rank=rank, world_size=world, coordinator="10.0.0.1:29700", token=secret),
        client=HTTPVLLMWeightSyncClient("http://rollout:8000"), source=ModuleSource(model))
    for step in ...:
        train(...)
        engine.send_weights()   # only the change crosses the network; the server applies it atomically

Importing this module registers both engines with vLLM's factories (idempotent)."""
from .plugin import register

_ENGINES = {"DeltacastTrainerInitInfo": "trainer_engine", "DeltacastTrainerWeightTransferEngine": "trainer_engine",
            "DeltacastUpdateInfo": "worker_engine", "DeltacastWeightTransferEngine": "worker_engine",
            "DeltacastWorkerInitInfo": "worker_engine"}


def __getattr__(name):
    """The engines are imported when first named (they need vLLM; loading does not)."""
    module = _ENGINES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    return getattr(import_module(f"{__name__}.{module}"), name)


register()

__all__ = ["register", *_ENGINES]
