"""Several training lists (asrkit.data.mixing): the --train_data items, each list's share of
an epoch, and the sampler's guarantees with weighted lists (equal batch counts per rank,
seeded plans, exact resume)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from asrkit.data.mixing import ListMix, ListSpecError, share_counts
from asrkit.data.sampler import EpochPlanner, RankBatchSampler
from tests.data.test_sampler import make_conf, make_list, walk, world_walk


def test_train_data_items_are_paths_or_weighted_paths():
    assert ListMix.parse("data/train/data.list") == ListMix(("data/train/data.list",), None)
    assert ListMix.parse(["a.list", "b.list"]) == ListMix(("a.list", "b.list"), None)
    assert ListMix.parse(["a.list:0.7", "c:/b.list:0.3"]) == ListMix(("a.list", "c:/b.list"), (0.7, 0.3))
    assert ListMix.parse(["dir:x/a.list"]).paths == ("dir:x/a.list",)  # (no number after ':': a path)
    with pytest.raises(ListSpecError, match="weights on some lists but not on all"):
        ListMix.parse(["a.list:0.7", "b.list"])
    with pytest.raises(ListSpecError, match="must be a number > 0"):
        ListMix.parse(["a.list:0", "b.list:1"])
    assert share_counts([1000, 100], [0.5, 0.5]) == [550, 550]


def mixed_planner(sizes=(60, 15), weights=(0.5, 0.5), shard=False, seed=3):
    keys, durations, tars = make_list(sum(sizes), shard=shard)
    bounds = np.cumsum([0, *sizes])
    return EpochPlanner(keys, durations, tars, make_conf("dynamic"), train=True, seed=seed,
                        mix=(list(zip(bounds[:-1], bounds[1:])), weights))


@pytest.mark.parametrize("shard", [False, True])
def test_each_list_gets_its_share_of_every_epoch(shard):
    planner = mixed_planner(shard=shard)
    for epoch in range(3):
        drawn = Counter(i for b in planner.batches(epoch) for i in b.tolist())
        from_small = sum(n for i, n in drawn.items() if i >= 60)
        from_big = sum(n for i, n in drawn.items() if i < 60)
        if shard:  # whole tars (7 members): the share to within one tar
            assert abs(from_small - 38) < 7 and abs(from_big - 38) < 7
        else:
            assert (from_big, from_small) == (38, 38)  # round(75 * 0.5) each
            assert set(i for i in drawn if i >= 60) == set(range(60, 75))  # the small list: whole passes
            assert max(drawn.values()) <= 3
    plan = [b.tolist() for b in planner.batches(2)]
    assert [b.tolist() for b in mixed_planner(shard=shard).batches(2)] == plan  # seeded: rebuilt, the same
    assert [b.tolist() for b in planner.batches(1)] != plan
    assert [b.tolist() for b in mixed_planner(shard=shard, seed=4).batches(2)] != plan


def test_ranks_get_equal_batch_counts_and_resume_exactly():
    planner = mixed_planner()
    full = world_walk(planner, 3, 1)
    assert len({len(r) for r in full}) == 1
    for rank in range(3):
        s = RankBatchSampler(planner, rank=rank, world_size=3)
        s.set_epoch(1)
        for position, _ in s.start_pass()[:2]:
            s.mark_consumed(position)
        resumed = RankBatchSampler(mixed_planner(), rank=rank, world_size=3)
        resumed.load_state_dict(s.state_dict())
        resumed.set_epoch(1)
        assert walk(resumed) == full[rank][2:]
    reweighted = mixed_planner(weights=(0.8, 0.2))
    with pytest.raises(ValueError, match="another data list or another"):
        RankBatchSampler(reweighted, rank=0, world_size=3).load_state_dict(s.state_dict())
