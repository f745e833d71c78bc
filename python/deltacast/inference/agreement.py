"""How an engine's workers exchange their outcomes for apply_together(): ``agree(name, value)``
returns every worker's (name, value) in worker order, over the process group the engine already
keeps for its workers (vLLM's world group, SGLang's tensor-parallel group)."""


def alone(name, value):
    """One worker: just its own outcome."""
    return [(name, value)]


def over_process_group(cpu_group, world_size):
    """``agree`` over `cpu_group` (a torch.distributed group on a CPU backend) of `world_size`
    workers; `alone` where there is no group or a single worker."""
    if cpu_group is None or world_size <= 1:
        return alone
    import torch.distributed as dist

    def agree(name, value):
        out = [None] * world_size
        dist.all_gather_object(out, (name, value), group=cpu_group)
        return out

    return agree
