"""Shape-bounded buckets (asrkit.data.buckets, ``batch_type: bucket_frames``): edges,
padding to them, the frame budget, the bounded shape count, and the sampler's guarantees
(equal counts per rank, exact resume, seeded plans) under this batch type."""
from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import torch

from asrkit.data.buckets import OVERFLOW_MULTIPLE, optimal_edges, padded_length, planned_tokens
from asrkit.data.loader_schema import BatchConf
from asrkit.data.processors import collate
from asrkit.data.sampler import EpochPlanner, RankBatchSampler
from tests.data.test_sampler import make_conf, make_list, walk, world_walk


def planner(n=240, *, seed=11, speeds=None, buckets=4, budget=900, boundaries=(), sizes=(), train=True):
    keys, durations, tars = make_list(n)
    conf = make_conf("bucket_frames")
    conf.batch_conf.bucket_boundaries, conf.batch_conf.bucket_batch_sizes = list(boundaries), list(sizes)
    conf.batch_conf.num_buckets, conf.batch_conf.max_frames_in_batch = buckets, budget
    tokens = np.round(np.asarray(durations) * 3).astype(int) + 1
    return EpochPlanner(keys, durations, tars, conf, train=train, seed=seed, speeds=speeds, tokens=tokens)


def test_optimal_edges_match_a_brute_force_search():
    rng = np.random.default_rng(0)
    for _ in range(40):
        frames, count = rng.integers(1, 40, size=12), int(rng.integers(1, 5))
        edges = optimal_edges(frames, np.ones(12), count, multiple=1)
        cost = lambda e: sum(min(x for x in e if x >= f) for f in frames)  # noqa: E731
        values = sorted(set(frames.tolist()))
        best = min(cost([*c, values[-1]]) for r in range(count) for c in itertools.combinations(values[:-1], r))
        assert len(edges) <= count and edges[-1] == values[-1] and cost(edges) == best
    assert all(e % 8 == 0 for e in optimal_edges(rng.integers(1, 900, 300), np.ones(300), 6))


@pytest.mark.parametrize("speeds", [None, (0.9, 1.0, 1.1)])
def test_batches_fit_their_bucket_edges_and_the_frame_budget(speeds):
    p = planner(speeds=speeds)
    layout = p.layout
    assert len(layout.frame_edges) == 4 and list(layout.frame_edges) == sorted(layout.frame_edges)
    for epoch in (0, 1):
        frames = p.frames_of(epoch)
        sizes = {}
        for b in p.batches(epoch):
            pad_f, pad_t = p.pad_to(b, epoch)
            assert frames[b].max() <= pad_f and p.tokens[b].max() <= pad_t, "an utterance longer than its edge"
            bucket = layout.frame_edges.index(pad_f)
            assert bucket == 0 or frames[b].min() > layout.frame_edges[bucket - 1], "utterance in a too-long bucket"
            assert len(b) <= layout.batch_sizes[bucket] == max(1, 900 // pad_f)  # the frame budget
            assert len(b) * pad_f <= 900 or len(b) == 1
            sizes.setdefault(bucket, []).append(len(b))
        for bucket, got in sizes.items():  # full batches, and at most one rest per bucket
            assert sum(1 for s in got if s != layout.batch_sizes[bucket]) <= 1


def test_given_boundaries_and_sizes_are_used():
    p = planner(boundaries=(150, 250), sizes=(6, 4, 3))
    assert p.layout.boundaries == (150, 250) and p.layout.batch_sizes == (6, 4, 3)
    assert p.layout.frame_edges == (149, 249, int(p.frames.max()))
    assert BatchConf(batch_type="bucket_frames").validate() == []
    assert BatchConf(batch_type="bucket_frames", num_buckets=3, bucket_batch_sizes=[1, 2]).validate()
    assert BatchConf(batch_type="bucket_frames", bucket_boundaries=[20, 10]).validate()


@pytest.mark.parametrize("world", [1, 3, 8])
def test_shapes_are_bounded_and_counted(world):
    p = planner(n=400, speeds=(0.9, 1.0, 1.1))
    stats = p.plan_stats(2, world)
    dealt = [b for r in world_walk(p, world, 2) for b in r if b]
    shapes = {(len(b), *p.pad_to(np.asarray(b), 2)) for b in dealt}
    assert stats["shapes"] == len(shapes) and stats["batches"] == len(dealt)
    assert len(shapes) <= 2 * len(p.layout.frame_edges) + world - 1  # full + rest per bucket + rank splits
    frames = p.frames_of(2)
    real = sum(int(frames[b].sum()) for b in dealt)
    assert stats["frame_padding"] == pytest.approx(1 - real / sum(len(b) * p.pad_to(np.asarray(b), 2)[0]
                                                                  for b in dealt))


def test_collate_pads_to_the_edges_and_rounds_an_overflow():
    samples = [{"key": f"u{i}", "feat": torch.ones(n, 4), "tokens": [1] * (n // 10)} for i, n in enumerate((30, 57))]
    batch = collate(samples, feat_dim=4, pad_to=(64, 9))
    assert batch["feats"].shape == (2, 64, 4) and batch["target"].shape == (2, 9)
    assert batch["feats"][1, 57:].abs().sum() == 0 and (batch["target"][0, 3:] == -1).all()
    assert batch["feats_lengths"].tolist() == [30, 57] and batch["target_lengths"].tolist() == [3, 5]
    over = collate(samples, feat_dim=4, pad_to=(40, 2))
    assert over["feats"].shape[1] == 64 and over["target"].shape[1] == OVERFLOW_MULTIPLE
    assert padded_length(5, 0) == 5 and collate([], feat_dim=4, pad_to=(64, 9))["feats"].shape == (0, 0, 4)
    assert planned_tokens(["a b  c", "", None, "你好"]).tolist() == [3, 0, 0, 2]


@pytest.mark.parametrize("train", [True, False])
def test_every_rank_same_count_every_utterance_exactly_once(train):
    for n, world in itertools.product([1, 5, 47, 240], [1, 2, 3, 7]):
        p = planner(n=n, train=train, speeds=(0.9, 1.0, 1.1))
        ranks = world_walk(p, world, 1)
        assert len({len(r) for r in ranks}) == 1
        assert sorted(i for r in ranks for b in r for i in b) == list(range(n))


def test_resume_mid_epoch_yields_exactly_the_rest_and_rebuilt_plans_agree():
    p = planner(speeds=(0.9, 1.0, 1.1))
    full = world_walk(p, 2, 3)
    for k in (0, 1, 3, len(full[0])):
        for rank in range(2):
            s = RankBatchSampler(p, rank=rank, world_size=2)
            s.set_epoch(3)
            for position, _ in s.start_pass()[:k]:
                s.mark_consumed(position)
            resumed = RankBatchSampler(planner(speeds=(0.9, 1.0, 1.1)), rank=rank, world_size=2)
            resumed.load_state_dict(s.state_dict())
            resumed.set_epoch(3)
            rest = resumed.start_pass()
            assert [pos for pos, _ in rest] == list(range(k, len(full[rank])))
            assert [b.tolist() for _, b in rest] == full[rank][k:]
            assert [resumed.planner.pad_to(b, 3) for _, b in rest] == [p.pad_to(np.asarray(b), 3)
                                                                       for b in full[rank][k:]]
    other = RankBatchSampler(planner(buckets=5), rank=0, world_size=2)
    with pytest.raises(ValueError, match="fingerprint"):
        other.load_state_dict(RankBatchSampler(p, rank=0, world_size=2).state_dict())


def test_plans_are_seeded_by_seed_and_epoch():
    a, b = planner(seed=5), planner(seed=5)
    assert [x.tolist() for x in a.batches(2)] == [x.tolist() for x in b.batches(2)]
    assert [x.tolist() for x in a.batches(2)] != [x.tolist() for x in a.batches(3)]
    assert [x.tolist() for x in a.batches(2)] != [x.tolist() for x in planner(seed=6).batches(2)]
    assert a.layout == planner(seed=6).layout, "the layout (so the shapes) is the same in every epoch and seed"


def test_the_plan_is_logged_at_epoch_start(caplog):
    s = RankBatchSampler(planner(), rank=0, world_size=2)
    with caplog.at_level(logging.INFO, logger="asrkit.data.sampler"):
        s.set_epoch(1)
        walk(s)
        walk(s)
    lines = [r.getMessage() for r in caplog.records if "plan:" in r.getMessage()]
    assert len(lines) == 1 and "distinct shapes" in lines[0] and "padding" in lines[0]


def test_the_loader_hands_out_batches_padded_to_their_bucket():
    from asrkit.data.dataset import AsrDataLoader  # deferred: the loader imports torch's DataLoader

    p = planner(n=60)
    frames, tokens = p.frames_of(0), p.tokens

    class Processor:  # a sample of exactly its planned length
        def __call__(self, i, epoch):
            return {"key": str(i), "feat": torch.zeros(int(frames[i]), 2), "tokens": [1] * int(tokens[i])}

        def collate(self, samples, pad_to=None):
            return collate(samples, feat_dim=2, pad_to=pad_to)

    loader = AsrDataLoader(list(range(60)), Processor(), RankBatchSampler(p, rank=0, world_size=1), num_workers=0)
    loader.set_epoch(0)
    shapes = {(b["feats"].shape[0], b["feats"].shape[1], b["target"].shape[1]) for b in loader}
    assert shapes == {(len(b), *p.pad_to(b, 0)) for b in p.batches(0)}
    assert {s[1] for s in shapes} <= set(p.layout.frame_edges)
