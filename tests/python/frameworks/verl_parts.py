"""The Ray workers of the verl test: a trainer rank as verl's actor workers are (a verl Worker that
trains a real tiny Llama and hands the checkpoint engine every tensor at each sync, as FSDP's
get_per_tensor_param does), and a rollout worker that is verl's own CheckpointEngineWorker with a
server adapter that loads what it is given into a real model (verl's vLLM and SGLang adapters
need a GPU). Importable by Ray's worker processes (PYTHONPATH)."""
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from verl.checkpoint_engine import CheckpointEngineRegistry, CheckpointEngineWorker
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.import_utils import import_external_libs
from verl.workers.rollout import BaseRollout, RolloutReplica


def tiny_llama(model_dir, seed):
    """The model of `model_dir`'s config, initialised from `seed`."""
    config = LlamaConfig.from_pretrained(model_dir)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(torch.bfloat16)


class TrainerRank(Worker):
    """One rank of the trainer: the same data and steps on every rank (data parallel), so every
    rank holds the same full weights, as an FSDP rank's all-gathered view of them."""

    def __init__(self, model_dir, checkpoint_engine_config):
        super().__init__()
        self.model = tiny_llama(model_dir, seed=0)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-6, weight_decay=0.0)  # an RL learning rate: a few % of bf16 elements change
        config = checkpoint_engine_config
        import_external_libs(config.custom_backend_module)
        kwargs = dict(config.engine_kwargs.get(config.backend, {}))
        self.checkpoint_engine = CheckpointEngineRegistry.new(
            config.backend, is_master=int(os.environ["RANK"]) == 0,
            bucket_size=config.update_weights_bucket_megabytes << 20, **kwargs)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def train(self, step):
        generator = torch.Generator().manual_seed(step)
        tokens = torch.randint(0, self.model.config.vocab_size, (4, 16), generator=generator)
        loss = self.model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return float(loss.detach())

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps=None, mode="auto"):
        named = ((name, tensor.detach()) for name, tensor in self.model.state_dict().items())
        return await self.checkpoint_engine.send_weights(named, global_steps=global_steps)

    @register(dispatch_mode=Dispatch.DP_COMPUTE, blocking=False)
    def execute_checkpoint_engine(self, method, *args, **kwargs):
        return getattr(self.checkpoint_engine, method)(*args, **kwargs)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def state(self):
        return {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}


class ModelAdapter(BaseRollout):
    """verl's server-adapter interface over a real model in this process: update_weights loads
    the (name, tensor) pairs it is given, as an inference engine's load_weights does."""

    def __init__(self, config, model_config):
        super().__init__(config, model_config, device_mesh=None)
        self.model = tiny_llama(model_config.local_path, seed=1)  # not the trainer's weights
        self.loaded = []

    async def resume(self, tags):
        pass

    async def release(self):
        pass

    async def update_weights(self, weights, **kwargs):
        params = self.model.state_dict()
        names = []
        async for name, tensor in weights:
            params[name].copy_(tensor)
            names.append(name)
        self.loaded.append(names)


class RolloutWorker(CheckpointEngineWorker):
    def __init__(self, rollout_config, model_config):
        super().__init__(rollout_config, model_config, ModelAdapter(rollout_config, model_config))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def state(self):
        return {name: tensor.detach().clone() for name, tensor in self.server_adapter.model.state_dict().items()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def loaded(self):
        """The names each update_weights loaded."""
        return self.server_adapter.loaded

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self):
        return os.getpid()


class Replica(RolloutReplica):
    """A rollout replica whose workers are given (no inference server to launch on CPU)."""

    def __init__(self, replica_rank, config, model_config, workers):
        super().__init__(replica_rank, config, model_config)
        self.workers = workers

    async def abort_all_requests(self, reject_request=False):
        pass

    async def resume_generation(self):
        pass

    async def release_kv_cache(self):
        pass

    async def resume_kv_cache(self):
        pass

    def get_ray_class_with_init_args(self):
        raise NotImplementedError

    async def launch_servers(self):
        raise NotImplementedError
