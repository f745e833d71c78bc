"""checkpoint-engine's ``checkpoint_engine.distributed`` functions over
torch.distributed's default group (the one ParameterServer.init_process_group
creates), for scripts that call them between ParameterServer calls."""


def _dist():
    from ._rendezvous import torch_module
    return torch_module().distributed


def use_backend(backend):
    """checkpoint-engine picks a custom communication backend here; deltacast moves no weights
    through it, so only None (torch.distributed) is taken."""
    if backend is not None:
        from ..errors import InvalidArgumentError
        raise InvalidArgumentError(f"use_backend({backend!r}): deltacast.compat uses torch.distributed only")


def init_process_group(*args, **kwargs):
    return _dist().init_process_group(*args, **kwargs)


def destroy_process_group(group=None):
    return _dist().destroy_process_group(group)


def is_initialized():
    return _dist().is_initialized()


def all_gather_object(object_list, obj, group=None):
    return _dist().all_gather_object(object_list, obj, group=group)


def all_reduce(tensor, op=None, group=None, **kwargs):
    dist = _dist()
    return dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op is None else op, group=group, **kwargs)


def broadcast(tensor, src=0, group=None, **kwargs):
    return _dist().broadcast(tensor, src=src, group=group, **kwargs)


def barrier(group=None, **kwargs):
    return _dist().barrier(group=group, **kwargs)


def new_group(ranks, **kwargs):
    return _dist().new_group(ranks, **kwargs)
