"""deltacast as verl's checkpoint engine, through verl's own CheckpointEngineManager and
CheckpointEngineWorker on a Ray cluster on this CPU: 2 trainer ranks training a real tiny Llama,
2 rollout replicas of one worker each, every connection encrypted (engine_kwargs encrypt=True).
Every rollout worker must hold the trainer's weights bit for bit after each sync, and after the
first sync only the change crosses the network."""
import os
import signal
import threading
import time

import pytest
import ray
import torch
from verl.checkpoint_engine import CheckpointEngineManager
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.workers.config import CheckpointEngineConfig, HFModelConfig, RolloutConfig

import tiny_model
import verl_parts

SYNCS = 6


def bits(tensor):
    return tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor


def assert_exact(expected, got, who):
    assert expected.keys() == got.keys(), who
    for name, tensor in expected.items():
        assert torch.equal(bits(tensor), bits(got[name])), f"{who}: '{name}' differs"


class Cluster:
    def __init__(self, tmp):
        model_dir = tiny_model.save(str(tmp / "model"), tiny_model.checkpoint_tensors(seed=3))
        self.model_config = HFModelConfig(path=model_dir)
        self.engine_config = CheckpointEngineConfig(
            backend="deltacast", custom_backend_module="deltacast.integrations.verl",
            engine_kwargs={"deltacast": {"token": "verl-test", "timeout": 120, "agree_timeout": 15,
                                         "encrypt": True}})
        self.rollout_config = RolloutConfig(name="vllm", tensor_model_parallel_size=1,
                                            checkpoint_engine=self.engine_config)
        pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, max_colocate_count=1)
        self.trainer = RayWorkerGroup(resource_pool=pool, device_name="cpu", ray_cls_with_init=RayClassWithInitArgs(
            cls=ray.remote(verl_parts.TrainerRank), model_dir=model_dir,
            checkpoint_engine_config=self.engine_config))
        self.rollouts = [self.rollout_group() for _ in range(2)]
        self.replicas = [verl_parts.Replica(i, self.rollout_config, self.model_config, group.workers)
                         for i, group in enumerate(self.rollouts)]
        self.manager = CheckpointEngineManager(self.engine_config, self.trainer, self.replicas)

    def rollout_group(self):
        """One rollout worker in a group of its own (a replica's server process)."""
        pool = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=1)
        return RayWorkerGroup(resource_pool=pool, device_name="cpu", ray_cls_with_init=RayClassWithInitArgs(
            cls=ray.remote(verl_parts.RolloutWorker), rollout_config=self.rollout_config,
            model_config=self.model_config))

    def rollout_states(self):
        return [group.state()[0] for group in self.rollouts]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join([here, os.path.join(here, "..", "vllm"),
                                                os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        yield Cluster(tmp_path_factory.mktemp("verl"))
    finally:
        ray.shutdown()


def stats_of(group):
    return ray.get(group.execute_checkpoint_engine(["stats"]))[0]


def test_syncs_are_exact_and_carry_the_change(cluster):
    dense = None
    received_before = [0, 0]
    for step in range(1, SYNCS + 1):
        cluster.trainer.train(step)
        metrics = cluster.manager.update_weights(global_steps=step)
        trainer_states = cluster.trainer.state()
        assert_exact(trainer_states[0], trainer_states[1], f"trainer rank 1 at step {step}")
        for worker, state in enumerate(cluster.rollout_states()):
            assert_exact(trainer_states[0], state, f"rollout worker {worker} after sync {step}")
        dense = sum(t.numel() * t.element_size() for t in trainer_states[0].values())
        received = [stats_of(group)["received_bytes"] for group in cluster.rollouts]
        # encrypt=True in engine_kwargs reaches every rollout worker's link to every trainer rank.
        assert all(set(stats_of(group)["protections"]) == {"encrypted"} for group in cluster.rollouts)
        per_sync = [now - before for now, before in zip(received, received_before)]
        received_before = received
        wire = sum(v for k, v in metrics.items() if k.endswith("/wire_bytes"))
        print(f"verl sync {step}: model {dense} B, rollout workers received {per_sync} B "
              f"({max(per_sync) / dense:.3f} of the model); trainer ranks' wire bytes {wire}")
        if step == 1:
            assert min(per_sync) >= dense * 0.5, "the first sync carries the model"
        else:
            assert max(per_sync) < dense * 0.25, f"sync {step} carried {per_sync} B of a {dense} B model"
    loaded = cluster.rollouts[0].loaded()[0]
    assert len(loaded[0]) == len(trainer_states[0]), "the first sync loads every tensor"
    assert all(len(names) <= len(trainer_states[0]) for names in loaded[1:])


def test_rollout_worker_killed_mid_sync_leaves_the_others_at_the_previous_step(cluster):
    """Rollout worker 1 is stopped, the sync starts and waits on it, then it is SIGKILLed: verl's
    manager raises naming the dead worker, worker 0 holds the previous step whole, and once the
    replica has a new worker the next sync brings every worker to the trainer's weights."""
    step = SYNCS + 1
    before = cluster.trainer.state()[0]
    victim = cluster.rollouts[1]
    pid = victim.pid()[0]
    os.kill(pid, signal.SIGSTOP)
    cluster.trainer.train(step)
    errors = []

    def sync():
        try:
            cluster.manager.update_weights(global_steps=step)
        except Exception as e:  # noqa: BLE001 - the test looks at what it is
            errors.append(e)

    thread = threading.Thread(target=sync)
    thread.start()
    time.sleep(3)
    assert thread.is_alive(), "the sync ended without the stopped worker"
    os.kill(pid, signal.SIGKILL)
    thread.join(120)
    assert not thread.is_alive(), "the sync did not end once the worker died"
    assert errors and "RolloutWorker" in str(errors[0]) and "died" in str(errors[0]), errors
    assert_exact(before, cluster.rollouts[0].state()[0], "the surviving rollout worker")
    cluster.rollouts[1] = cluster.rollout_group()
    cluster.replicas[1].workers = cluster.rollouts[1].workers
    step += 1
    cluster.trainer.train(step)
    cluster.manager.update_weights(global_steps=step)
    expected = cluster.trainer.state()[0]
    for worker, state in enumerate(cluster.rollout_states()):
        assert_exact(expected, state, f"rollout worker {worker} after the sync that followed the failure")
