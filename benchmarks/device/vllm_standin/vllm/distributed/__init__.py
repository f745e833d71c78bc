"""vllm.distributed's tensor-parallel queries; the stand-in server's worker
processes set them (vLLM's parallel_state does)."""
_tp = {"rank": 0, "world_size": 1}


def set_tensor_model_parallel(rank, world_size):
    _tp.update(rank=rank, world_size=world_size)


def get_tensor_model_parallel_rank():
    return _tp["rank"]


def get_tensor_model_parallel_world_size():
    return _tp["world_size"]
