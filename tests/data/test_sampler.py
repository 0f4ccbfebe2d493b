"""Epoch plans and rank walks (asrkit.data.sampler), without a DataLoader.

Worlds are simulated in-process: rank k of W is ``RankBatchSampler(planner, rank=k,
world_size=W)``; a planner built again from the same inputs stands for another process.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from asrkit.data.loader_schema import LoaderKeys
from asrkit.data.sampler import EpochPlanner, RankBatchSampler
from tests.helpers import REPO

MODES = ("static", "dynamic", "bucket")


def make_conf(mode="static", *, shuffle=True, sort=True, shuffle_size=16, sort_size=8, list_shuffle=True):
    conf = LoaderKeys()
    conf.list_shuffle = list_shuffle
    conf.shuffle, conf.sort = shuffle, sort
    conf.shuffle_conf.shuffle_size, conf.sort_conf.sort_size = shuffle_size, sort_size
    conf.batch_conf.batch_type = mode
    conf.batch_conf.batch_size = 5
    conf.batch_conf.max_frames_in_batch = 900
    conf.batch_conf.bucket_boundaries = [150, 250]
    conf.batch_conf.bucket_batch_sizes = [6, 4, 3]
    return conf


def make_list(n, *, shard=False, seed=0):
    """Keys, durations (0.5-3.5 s) and tars (7-member tars when ``shard``)."""
    rng = np.random.default_rng(seed)
    keys = [f"utt{i:04d}" for i in range(n)]
    durations = rng.uniform(0.5, 3.5, size=n).round(3).tolist()
    tars = [f"shard_{i // 7:03d}.tar" if shard else None for i in range(n)]
    return keys, durations, tars


def planner_for(n, mode="static", *, shard=False, train=True, seed=11, **conf_kw):
    keys, durations, tars = make_list(n, shard=shard)
    return EpochPlanner(keys, durations, tars, make_conf(mode, **conf_kw), train=train, seed=seed)


def walk(sampler):
    """Utterance-index batches of one full pass, marking each as consumed."""
    out = []
    for position, batch in sampler.start_pass():
        sampler.mark_consumed(position)
        out.append(batch.tolist())
    return out


def world_walk(planner, world_size, epoch):
    samplers = [RankBatchSampler(planner, rank=r, world_size=world_size) for r in range(world_size)]
    for s in samplers:
        s.set_epoch(epoch)
    return [walk(s) for s in samplers]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("shard", [False, True])
def test_every_rank_same_count_every_utterance_exactly_once(mode, train, shard):
    for n, world_size in itertools.product([1, 2, 3, 5, 13, 47, 101], [1, 2, 3, 4, 7]):
        planner = planner_for(n, mode, shard=shard, train=train)
        for epoch in (0, 1):
            ranks = world_walk(planner, world_size, epoch)
            counts = {len(r) for r in ranks}
            assert len(counts) == 1, f"n={n} W={world_size}: unequal batch counts {counts}"
            flat = sorted(i for r in ranks for b in r for i in b)
            assert flat == list(range(n)), f"n={n} W={world_size}: utterances lost or repeated"
            expected = -(-len(planner.batches(epoch)) // world_size)
            assert counts == {expected}
            empties = sum(1 for r in ranks for b in r if not b)
            assert empties == max(0, expected * world_size - n)


def test_epochs_differ_and_plans_are_identical_across_ranks_and_rebuilds():
    a, b = planner_for(101, "dynamic"), planner_for(101, "dynamic")
    plan0 = [x.tolist() for x in a.batches(0)]
    assert plan0 == [x.tolist() for x in b.batches(0)]
    assert plan0 != [x.tolist() for x in a.batches(1)]
    ranks_a, ranks_b = world_walk(a, 3, 2), world_walk(b, 3, 2)
    assert ranks_a == ranks_b
    assert [x.tolist() for x in planner_for(101, "dynamic", seed=12).batches(0)] != plan0


def test_plan_is_identical_in_another_process_with_another_hash_seed():
    keys, durations, tars = make_list(47, shard=True)
    args = json.dumps([keys, durations, tars])
    code = ("import json, sys\n"
            "from asrkit.data.loader_schema import LoaderKeys\n"
            "from asrkit.data.sampler import EpochPlanner\n"
            "keys, durations, tars = json.loads(sys.argv[1])\n"
            "conf = LoaderKeys(); conf.shuffle_conf.shuffle_size = 16; conf.sort_conf.sort_size = 8\n"
            "p = EpochPlanner(keys, durations, tars, conf, train=True, seed=11)\n"
            "print(json.dumps([[b.tolist() for b in p.batches(e)] for e in (0, 3)]))\n")
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code, args], capture_output=True, text=True, env=env,
                         cwd=REPO, check=True).stdout
    conf = LoaderKeys()
    conf.shuffle_conf.shuffle_size, conf.sort_conf.sort_size = 16, 8
    here = EpochPlanner(keys, durations, tars, conf, train=True, seed=11)
    assert json.loads(out) == [[b.tolist() for b in here.batches(e)] for e in (0, 3)]


def test_cv_plan_keeps_list_order_and_ignores_the_epoch():
    planner = planner_for(23, "static", train=False, sort=False)
    assert [b.tolist() for b in planner.batches(0)] == [list(range(i, min(i + 5, 23))) for i in range(0, 23, 5)]
    assert [b.tolist() for b in planner.batches(0)] == [b.tolist() for b in planner.batches(5)]


def test_sorted_batches_hold_similar_lengths_and_batch_order_is_shuffled():
    planner = planner_for(400, "dynamic", shuffle_size=400, sort_size=100)
    batches = planner.batches(0)
    frames = planner.frames
    padded = sum(int(frames[b].max()) * len(b) for b in batches)
    assert padded / frames.sum() < 1.1, "sorting should keep padding small"
    longest = [int(frames[b].max()) for b in batches]
    assert longest != sorted(longest), "batch order should be shuffled after sorting"


def test_shard_members_are_dealt_individually_when_shuffled():
    planner = planner_for(70, "static", shard=True)
    ranks = world_walk(planner, 4, 0)
    rank_of = {i: r for r, batches in enumerate(ranks) for b in batches for i in b}
    tar0_ranks = {rank_of[i] for i in range(7)}
    assert len(tar0_ranks) > 1, "members of one tar should reach several ranks"


def test_list_shuffle_without_shuffle_keeps_tar_members_together():
    planner = planner_for(70, "static", shard=True, shuffle=False, sort=False)
    order = planner.utterance_order(0)
    tars = order // 7
    changes = int((np.diff(tars) != 0).sum())
    assert changes == 9, "each of the 10 tars should be one contiguous run"
    assert tars.tolist() != sorted(tars.tolist())


def test_speed_perturbation_is_planned_at_the_lengths_drawn():
    """The plan knows each utterance's speed in each epoch (the processor draws it with the
    same pure function), so the real perturbed padded size of every batch is bounded."""
    from asrkit.data.processors import draw_speed
    keys, durations, tars = make_list(200)
    conf = make_conf("dynamic")
    speeds = (0.9, 1.0, 1.1)
    planner = EpochPlanner(keys, durations, tars, conf, train=True, seed=1, speeds=speeds)
    for epoch in (0, 1):
        real = np.array([np.floor(d / draw_speed(1, epoch, k, speeds) * 100) for k, d in zip(keys, durations)])
        for b in planner.batches(epoch):
            assert real[b].max() * len(b) <= conf.batch_conf.max_frames_in_batch
        assert sorted(int(i) for b in planner.batches(epoch) for i in b) == list(range(200))
    drawn = [draw_speed(1, 0, k, speeds) for k in keys]
    assert set(drawn) == set(speeds) and drawn != [draw_speed(1, 1, k, speeds) for k in keys]
    cv = EpochPlanner(keys, durations, tars, conf, train=False, seed=1, speeds=speeds)
    assert cv.speeds is None  # no perturbation outside training


def test_batches_never_span_two_sort_windows():
    keys, durations, tars = make_list(100)
    for mode in ("static", "dynamic"):
        planner = EpochPlanner(keys, durations, tars, make_conf(mode, sort_size=8), train=True, seed=3)
        order = planner.utterance_order(0).tolist()
        window_of = {u: pos // 8 for pos, u in enumerate(order)}
        for b in planner.batches(0):
            assert len({window_of[int(u)] for u in b}) == 1


# ----------------------------------------------------------------------------- positions


def test_resume_yields_exactly_the_batches_not_yet_consumed():
    planner = planner_for(101, "bucket")
    full = world_walk(planner, 2, 3)
    for k in (0, 1, 4, len(full[0]) - 1, len(full[0])):
        state = None
        for rank in range(2):
            s = RankBatchSampler(planner, rank=rank, world_size=2)
            s.set_epoch(3)
            for position, _ in s.start_pass()[:k]:
                s.mark_consumed(position)
            state = s.state_dict()
            assert state["consumed"] == k
            resumed = RankBatchSampler(planner_for(101, "bucket"), rank=rank, world_size=2)
            resumed.load_state_dict(state)
            resumed.set_epoch(3)  # the trainer's usual call keeps the restored position
            rest = resumed.start_pass()
            assert [p for p, _ in rest] == list(range(k, len(full[rank])))
            assert [b.tolist() for _, b in rest] == full[rank][k:]
            assert len(resumed) == len(full[rank])
            assert [b.tolist() for _, b in resumed.start_pass()] == full[rank], "next pass starts afresh"


@pytest.mark.parametrize("old_world,new_world", [(2, 3), (4, 1), (3, 2), (1, 4)])
@pytest.mark.parametrize("mode", MODES)
def test_resume_under_another_world_size_redeals_the_rest(old_world, new_world, mode):
    n = 53
    planner = planner_for(n, mode)
    old = world_walk(planner, old_world, 1)
    k = len(old[0]) // 2
    trained = [i for r in old for b in r[:k] for i in b]
    donor = RankBatchSampler(planner, rank=0, world_size=old_world)
    donor.set_epoch(1)
    for position, _ in donor.start_pass()[:k]:
        donor.mark_consumed(position)
    state = donor.state_dict()
    new = []
    for rank in range(new_world):
        s = RankBatchSampler(planner_for(n, mode), rank=rank, world_size=new_world)
        s.load_state_dict(state)
        s.set_epoch(1)
        rest = s.start_pass()
        assert rest[0][0] == k if rest else True
        new.append([b.tolist() for _, b in rest])
        assert len(s) == k + len(rest)
    assert len({len(r) for r in new}) == 1, "unequal batch counts after the re-deal"
    assert sorted(trained + [i for r in new for b in r for i in b]) == list(range(n))
    # a second interruption inside the re-dealt epoch resumes exactly as well
    s = RankBatchSampler(planner, rank=0, world_size=new_world)
    s.load_state_dict(state)
    for position, _ in s.start_pass()[:1]:
        s.mark_consumed(position)
    again = RankBatchSampler(planner, rank=0, world_size=new_world)
    again.load_state_dict(s.state_dict())
    assert [b.tolist() for _, b in again.start_pass()] == new[0][1:]


def test_state_survives_torch_save_with_weights_only(tmp_path):
    s = RankBatchSampler(planner_for(30), rank=1, world_size=2)
    s.set_epoch(2)
    for position, _ in s.start_pass()[:2]:
        s.mark_consumed(position)
    torch.save({"sampler": s.state_dict()}, tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)["sampler"]
    assert state == s.state_dict()
    assert state["epoch"] == 2 and state["consumed"] == 2 and state["world_size"] == 2


def test_state_of_another_list_or_config_is_refused():
    s = RankBatchSampler(planner_for(30), rank=0, world_size=1)
    s.start_pass()
    state = s.state_dict()
    for other in (planner_for(31), planner_for(30, "dynamic"), planner_for(30, seed=5)):
        with pytest.raises(ValueError, match="fingerprint"):
            RankBatchSampler(other, rank=0, world_size=1).load_state_dict(state)
    with pytest.raises(ValueError, match="malformed"):
        RankBatchSampler(planner_for(30), rank=0, world_size=1).load_state_dict(dict(state, consumed=999))
    with pytest.raises(ValueError, match="lacks"):
        RankBatchSampler(planner_for(30), rank=0, world_size=1).load_state_dict({"epoch": 0})


def test_set_epoch_to_another_epoch_discards_a_restored_position():
    planner = planner_for(40)
    s = RankBatchSampler(planner, rank=0, world_size=1)
    s.set_epoch(1)
    s.mark_consumed(2)
    t = RankBatchSampler(planner, rank=0, world_size=1)
    t.load_state_dict(s.state_dict())
    t.set_epoch(2)
    assert [p for p, _ in t.start_pass()] == list(range(len(t)))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="empty"):
        EpochPlanner([], [], [], make_conf(), train=True, seed=0)
    with pytest.raises(ValueError, match="seed"):
        planner_for(5, seed=-1)
    with pytest.raises(ValueError, match="rank"):
        RankBatchSampler(planner_for(5), rank=2, world_size=2)
    with pytest.raises(ValueError, match="epoch"):
        RankBatchSampler(planner_for(5), rank=0, world_size=1).set_epoch(-1)
