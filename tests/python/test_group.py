"""A sharded group from Python, in one process over real sockets: two trainer
ranks (tensor-parallel rows and columns, and an FSDP flat shard) publish their
shards by step; TP2 rank 1 with fused qkv_proj and a TP1 process hold their own
layouts and end every step exact. Layout and argument misuse is refused naming
the tensor or argument."""
import pytest
import torch

import deltacast

TOKEN = "group-test"

GROUP = deltacast.Group({"q": ("bf16", (64, 32)), "k": ("bf16", (32, 32)), "v": ("bf16", (32, 32)),
                         "o": ("bf16", (32, 64)), "embed": ("f32", (100, 32))})
FLAT_CUT = 1700  # the FSDP-style cut of embed's 3200 elements between the two ranks


def trainer_shards(r):
    return {"q": deltacast.rows("q", 32 * r, 32 * (r + 1)), "k": deltacast.rows("k", 16 * r, 16 * (r + 1)),
            "v": deltacast.rows("v", 16 * r, 16 * (r + 1)), "o": deltacast.columns("o", 32 * r, 32 * (r + 1)),
            "embed": deltacast.flat("embed", (0, FLAT_CUT)[r], (FLAT_CUT, 3200)[r])}


def tp_layout(r, n):
    def rows(t, size):
        return deltacast.rows(t, size // n * r, size // n * (r + 1))
    return {"qkv_proj": deltacast.fused(rows("q", 64), rows("k", 32), rows("v", 32)),
            "o_proj": deltacast.columns("o", 64 // n * r, 64 // n * (r + 1)),
            "embed_tokens": rows("embed", 100)}


def logical_model(seed):
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=g).to(torch.bfloat16 if dtype == "bf16" else torch.float32)
            for name, (dtype, shape) in GROUP.tensors.items()}


def take(model, spec):
    """The tensor a piece or fused pieces make of the logical model."""
    if isinstance(spec, deltacast.group.Piece):
        t = model[spec.tensor]
        if spec.flat:
            return t.reshape(-1)[spec.start:spec.stop].clone()
        return t.narrow(spec.dim, spec.start, spec.stop - spec.start).contiguous().clone()
    return torch.cat([take(model, p) for p in spec.pieces], dim=spec.dim).contiguous()


def bits(t):
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()


def step(model, seed, density):
    g = torch.Generator().manual_seed(seed)
    for t in model.values():
        flat = t.view(-1)
        idx = torch.randperm(flat.numel(), generator=g)[: max(1, int(density * flat.numel()))]
        flat[idx] = (flat[idx].float() + 0.01 * torch.randn(len(idx), generator=g)).to(flat.dtype)


def test_two_trainer_ranks_to_a_tp2_rank_and_a_tp1_process_every_step_exact():
    model = logical_model(1)
    shards = [trainer_shards(r) for r in range(2)]
    rank_tensors = [{n: take(model, s) for n, s in shards[r].items()} for r in range(2)]
    producers = [deltacast.Producer(rank_tensors[r], token=TOKEN, group=GROUP, rank=r, world_size=2,
                                    shards=shards[r], threads=1) for r in range(2)]
    entries = [p.group_entry for p in producers]
    layouts = [tp_layout(1, 2), tp_layout(0, 1)]
    held = [{n: torch.zeros_like(take(model, s)) for n, s in layout.items()} for layout in layouts]
    consumers = [deltacast.Consumer(held[c], layout=layouts[c], group=GROUP, ranks=entries, token=TOKEN,
                                    name=f"rollout{c}", threads=1) for c in range(2)]
    try:
        # TP2 rank 1 holds rank 1's rows and columns, and embed rows 50-99, which start in rank 0's flat shard.
        assert consumers[0].state()["ranks"] == [0, 1]
        for version in range(1, 6):
            if version > 1:
                step(model, version, 0.02)
            for r in range(2):
                for n, s in shards[r].items():
                    rank_tensors[r][n].copy_(take(model, s))
                assert producers[r].publish(version=version) == version
            for c in range(2):
                consumers[c].wait(version, timeout=30)
                for n, s in layouts[c].items():
                    assert bits(held[c][n]) == bits(take(model, s)), f"process {c}, {n}, version {version}"
        # Routing by need: of rank 0's delta the TP2 rank 1 holds only embed elements 1600-1699 and is
        # sent little of it; the TP1 process holds all of it and is sent all of it.
        producers[0].wait(5, timeout=30)  # its rounds' bookkeeping done, not only the commits
        report = producers[0].report(5)
        assert report["done"] and not report["full"]
        assert report["bytes_to"]["rollout0.r0"] < report["wire_bytes"] / 2, report
        assert report["bytes_to"]["rollout1.r0"] >= report["wire_bytes"] * 0.95, report
    finally:
        for c in consumers:
            c.close()
        for p in producers:
            p.close()


def test_group_misuse_is_refused_naming_the_tensor_or_argument():
    model = logical_model(2)
    shards = trainer_shards(0)
    tensors = {n: take(model, s) for n, s in shards.items()}
    # A shard whose tensor does not have the shape its piece says.
    wrong = dict(tensors)
    wrong["q"] = torch.zeros(31, 32, dtype=torch.bfloat16)
    with pytest.raises(deltacast.InvalidArgumentError, match="'q'"):
        deltacast.Producer(wrong, token=TOKEN, group=GROUP, rank=0, world_size=2, shards=shards)
    # A piece past its tensor's end, a tensor the group does not have, a rank out of range.
    past = dict(shards)
    past["o"] = deltacast.columns("o", 32, 65)
    with pytest.raises(deltacast.InvalidArgumentError, match="'o'"):
        deltacast.Producer(tensors, token=TOKEN, group=GROUP, rank=0, world_size=2, shards=past)
    unknown = dict(shards)
    unknown["q"] = deltacast.rows("lm_head", 0, 32)
    with pytest.raises(deltacast.InvalidArgumentError, match="lm_head"):
        deltacast.Producer(tensors, token=TOKEN, group=GROUP, rank=0, world_size=2, shards=unknown)
    with pytest.raises(deltacast.InvalidArgumentError, match="rank"):
        deltacast.Producer(tensors, token=TOKEN, group=GROUP, rank=2, world_size=2, shards=shards)
    with pytest.raises(deltacast.InvalidArgumentError, match="'k'"):
        deltacast.Producer({n: t for n, t in tensors.items() if n != "k"}, token=TOKEN, group=GROUP, rank=0,
                           world_size=2, shards=shards)
    # Consumers: a missing rank entry, a fused view of two dtypes, tensors that do not match.
    with deltacast.Producer(tensors, token=TOKEN, group=GROUP, rank=0, world_size=2, shards=shards) as p:
        layout = tp_layout(0, 2)
        held = {n: torch.zeros_like(take(model, s)) for n, s in layout.items()}
        with pytest.raises(deltacast.InvalidArgumentError, match="every rank once"):
            deltacast.Consumer(held, layout=layout, group=GROUP, ranks=[p.group_entry], token=TOKEN)
        mixed = dict(layout)
        mixed["qkv_proj"] = deltacast.fused(deltacast.rows("q", 0, 32), deltacast.rows("embed", 0, 16))
        other = dict(p.group_entry, rank=1, shards=p.group_entry["shards"])
        with pytest.raises(deltacast.InvalidArgumentError, match="qkv_proj"):
            deltacast.Consumer(held, layout=mixed, group=GROUP, ranks=[p.group_entry, other], token=TOKEN)
        with pytest.raises(deltacast.InvalidArgumentError, match="group"):
            deltacast.Consumer(held, layout=layout, ranks=[p.group_entry], token=TOKEN)
        # A step number that goes back is refused (the error is raised with the interpreter held).
        assert p.publish(version=3) == 3
        with pytest.raises(deltacast.InvalidArgumentError, match="not above"):
            p.publish(version=2)


def publish_step(model, shards, rank_tensors, producers, version):
    for r, p in enumerate(producers):
        for n, s in shards[r].items():
            rank_tensors[r][n].copy_(take(model, s))
        assert p.publish(version=version) == version


def test_ranks_meet_at_the_coordinator_rank_0_hosts_and_rollout_processes_need_only_its_address():
    model = logical_model(3)
    shards = [trainer_shards(r) for r in range(2)]
    rank_tensors = [{n: take(model, s) for n, s in shards[r].items()} for r in range(2)]
    # Rank 0 runs the coordinator (port 0 here: its address is then read back); rank 1 registers there.
    producers = [deltacast.Producer(rank_tensors[0], token=TOKEN, group=GROUP, rank=0, world_size=2,
                                    shards=shards[0], threads=1, coordinator="127.0.0.1:0")]
    coordinator = producers[0].coordinator
    assert coordinator.startswith("127.0.0.1:") and not coordinator.endswith(":0")
    producers.append(deltacast.Producer(rank_tensors[1], token=TOKEN, group=GROUP, rank=1, world_size=2,
                                        shards=shards[1], threads=1, coordinator=coordinator))
    assert producers[1].coordinator == coordinator
    layout = tp_layout(0, 1)
    held = {n: torch.zeros_like(take(model, s)) for n, s in layout.items()}
    consumer = deltacast.Consumer(held, layout=layout, connect=coordinator, token=TOKEN, name="tp1", threads=1)
    try:
        assert consumer.state()["ranks"] == [0, 1]
        for version in range(1, 4):
            if version > 1:
                step(model, version, 0.02)
            publish_step(model, shards, rank_tensors, producers, version)
            consumer.wait(version, timeout=30)
            for n, s in layout.items():
                assert bits(held[n]) == bits(take(model, s)), f"{n}, version {version}"
    finally:
        consumer.close()
        for p in producers:
            p.close()


def test_a_coordinator_of_its_own_forms_the_group_and_refuses_what_does_not_fit():
    model = logical_model(4)
    shards = [trainer_shards(r) for r in range(2)]
    rank_tensors = [{n: take(model, s) for n, s in shards[r].items()} for r in range(2)]
    with deltacast.Coordinator(2, listen="127.0.0.1:0", token=TOKEN) as coordinator:
        gone = coordinator.address
        assert coordinator.group() is None and coordinator.registered() == 0
        producers = [deltacast.Producer(rank_tensors[r], token=TOKEN, group=GROUP, rank=r, world_size=2,
                                        shards=shards[r], threads=1, coordinator=coordinator.address,
                                        host_coordinator=False) for r in range(2)]
        try:
            group = coordinator.group()
            assert [r["rank"] for r in group["ranks"]] == [0, 1]
            assert [t["name"] for t in group["tensors"]] == list(GROUP.tensors)
            # A third process claiming rank 1's rows of q as rank 0's is refused, naming the tensor.
            greedy = dict(shards[0], q=deltacast.rows("q", 16, 48))
            greedy_tensors = dict(rank_tensors[0], q=take(model, greedy["q"]))
            with pytest.raises(deltacast.InvalidArgumentError, match="'q'"):
                deltacast.Producer(greedy_tensors, token=TOKEN, group=GROUP, rank=0, world_size=2, shards=greedy,
                                   coordinator=coordinator.address, host_coordinator=False, register_timeout=10)
            # A rollout process expecting other tensors is told which; a wrong token is refused.
            layout = tp_layout(1, 2)
            held = {n: torch.zeros_like(take(model, s)) for n, s in layout.items()}
            other = deltacast.Group(dict(GROUP.tensors, k=("bf16", (32, 16))))
            with pytest.raises(deltacast.ManifestMismatchError, match="'k'"):
                deltacast.Consumer(held, layout=layout, group=other, connect=coordinator.address, token=TOKEN)
            with pytest.raises(deltacast.TokenError):
                deltacast.Consumer(held, layout=layout, connect=coordinator.address, token="wrong")
            consumer = deltacast.Consumer(held, layout=layout, group=GROUP, connect=coordinator.address, token=TOKEN,
                                          threads=1)
            with consumer:
                publish_step(model, shards, rank_tensors, producers, 1)
                consumer.wait(1, timeout=30)
                for n, s in layout.items():
                    assert bits(held[n]) == bits(take(model, s)), n
        finally:
            for p in producers:
                p.close()
    # Nobody there any more: a rank gives up after register_timeout, saying why.
    with pytest.raises(deltacast.TimeoutError, match="not registered"):
        deltacast.Producer(rank_tensors[1], token=TOKEN, group=GROUP, rank=1, world_size=2, shards=shards[1],
                           coordinator=gone, register_timeout=0.5)
    with pytest.raises(deltacast.InvalidArgumentError, match="coordinator"):
        deltacast.Producer(rank_tensors[1], token=TOKEN, coordinator=gone)
