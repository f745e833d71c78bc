"""checkpoint-engine's ``checkpoint_engine.distributed`` functions, over
torch.distributed (the group ParameterServer.init_process_group creates), for
scripts that call them between ParameterServer calls. Needs torch."""
import torch.distributed as torch_dist

from ..errors import InvalidArgumentError


def use_backend(backend):
    """checkpoint-engine can swap in vLLM's NCCL/HCCL communicators here; deltacast moves no
    weights through this group, so only torch.distributed is offered (None or "" keep it)."""
    if backend:
        raise InvalidArgumentError(f"use_backend({backend!r}): deltacast.compat.distributed is torch.distributed "
                                   "only (deltacast moves no weights through it)")


def init_process_group(rank, world_size, store, **kwargs):
    """torch.distributed's default group on `store` (backend: nccl with CUDA, gloo without,
    unless given)."""
    if "backend" not in kwargs:
        import torch
        kwargs["backend"] = "nccl" if torch.cuda.is_available() else "gloo"
    torch_dist.init_process_group(rank=rank, world_size=world_size, store=store, **kwargs)


def destroy_process_group(group=None):
    torch_dist.destroy_process_group(group)


def is_initialized():
    return torch_dist.is_initialized()


def all_gather_object(object_list, obj, group=None):
    torch_dist.all_gather_object(object_list, obj, group=group)


def all_reduce(tensor, op=torch_dist.ReduceOp.SUM, group=None, **kwargs):
    torch_dist.all_reduce(tensor, op=op, group=group, **kwargs)


def broadcast(tensor, src=0, group=None, **kwargs):
    torch_dist.broadcast(tensor, src=src, group=group, **kwargs)


def barrier(group=None, **kwargs):
    torch_dist.barrier(group=group, **kwargs)


def new_group(ranks, **kwargs):
    return torch_dist.new_group(ranks, **kwargs)
