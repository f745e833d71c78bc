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
from .trainer_engine import DeltacastTrainerInitInfo, DeltacastTrainerWeightTransferEngine
from .worker_engine import DeltacastUpdateInfo, DeltacastWeightTransferEngine, DeltacastWorkerInitInfo

register()

__all__ = ["register", "DeltacastTrainerInitInfo", "DeltacastTrainerWeightTransferEngine", "DeltacastUpdateInfo",
           "DeltacastWeightTransferEngine", "DeltacastWorkerInitInfo"]
