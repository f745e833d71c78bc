"""The rollout workers' agreement before a commit (the state machine alone, without Ray)."""
import asyncio

from deltacast.integrations.verl import Agreement, shard_of


def test_every_worker_arrives_and_none_is_missing():
    async def run():
        agreement = Agreement()
        return await asyncio.gather(agreement.arrive(5, 0, 2, 5.0), agreement.arrive(5, 1, 2, 5.0))
    assert asyncio.run(run()) == [[], []]


def test_a_worker_that_never_arrives_is_named_after_the_timeout():
    async def run():
        agreement = Agreement()
        missing = await agreement.arrive(7, 0, 3, 0.2)
        return missing, agreement.arrived_at(7), agreement.arrived_at(8)
    assert asyncio.run(run()) == ([1, 2], [0], [])


def test_versions_do_not_mix():
    async def run():
        agreement = Agreement()
        first = asyncio.ensure_future(agreement.arrive(1, 0, 2, 0.3))
        await agreement.arrive(2, 1, 2, 0.1)  # rank 1 at another version does not complete version 1
        return await first
    assert asyncio.run(run()) == [1]


def test_trainer_ranks_share_every_tensor_without_overlap():
    for world in (1, 2, 3, 8):
        for shape in ((), (1,), (3,), (7, 5), (64, 2, 2)):
            pieces = [shard_of(shape, 4, rank, world) for rank in range(world)]
            if len(shape) >= 1 and shape[0] >= world:
                assert [p[0] for p in pieces] == sorted(p[0] for p in pieces)
                assert pieces[0][0] == 0 and pieces[-1][1] == shape[0]
                assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
            else:
                assert pieces.count("whole") == 1 and pieces.count(None) == world - 1
