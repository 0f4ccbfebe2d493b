"""Plan steps of asrkit.data.batch_plan: shuffles, sorts, the three batch modes, splitting."""
from __future__ import annotations

import numpy as np
import pytest

from asrkit.data.batch_plan import (bucket_batches, dynamic_batches, permute_groups, permute_within_windows,
                                  planned_frames, sort_within_windows, split_to_multiple, static_batches)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _flat(batches):
    return sorted(int(i) for b in batches for i in b)


def test_planned_frames_is_100_per_second_floor_at_least_one():
    assert planned_frames([0.0, 0.004, 1.0, 2.555]).tolist() == [1, 1, 100, 255]
    assert planned_frames([1.0 / 0.9, 2.0 / 0.9]).tolist() == [111, 222]


@pytest.mark.parametrize("bad", [float("nan"), -0.5, float("inf")])
def test_planned_frames_rejects_unplannable_durations(bad):
    with pytest.raises(ValueError, match="list entry 1"):
        planned_frames([1.0, bad])


def test_permute_within_windows_keeps_each_window_set_and_is_seeded():
    order = np.arange(23)
    out = permute_within_windows(order, 5, _rng(1))
    for start in range(0, 23, 5):
        assert sorted(out[start:start + 5]) == list(range(start, min(start + 5, 23)))
    assert not np.array_equal(out, order)
    assert np.array_equal(out, permute_within_windows(order, 5, _rng(1)))
    assert not np.array_equal(out, permute_within_windows(order, 5, _rng(2)))


def test_permute_groups_moves_whole_groups_keeping_member_order():
    groups = np.array([0, 0, 0, 1, 2, 2, 3, 3, 3, 3, 4])
    out = permute_groups(groups, None, _rng(3))
    assert sorted(out.tolist()) == list(range(len(groups)))
    runs = [groups[out[0]]]
    for i in out[1:]:
        if groups[i] != runs[-1]:
            runs.append(groups[i])
    assert sorted(runs) == [0, 1, 2, 3, 4], "a group was split apart"
    for g in range(5):
        members = [int(i) for i in out if groups[i] == g]
        assert members == sorted(members)
    assert runs != [0, 1, 2, 3, 4]


def test_permute_groups_window_limits_how_far_groups_move():
    groups = np.arange(12)
    out = permute_groups(groups, 4, _rng(4))
    for start in range(0, 12, 4):
        assert sorted(out[start:start + 4]) == list(range(start, start + 4))


def test_sort_within_windows_sorts_each_window_only():
    frames = np.array([5, 1, 4, 2, 3, 9, 7, 8, 6])
    out = sort_within_windows(np.arange(9), frames, 4)
    assert frames[out].tolist() == [1, 2, 4, 5, 3, 7, 8, 9, 6]


def test_static_batches_last_batch_holds_the_rest():
    out = static_batches(np.arange(10), 4)
    assert [b.tolist() for b in out] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_dynamic_batches_are_greedy_runs_within_the_padded_frame_limit():
    frames = _rng(5).integers(50, 400, size=200)
    order = _rng(6).permutation(200)
    limit = 1200
    out = dynamic_batches(order, frames, limit)
    assert np.concatenate(out).tolist() == order.tolist()
    for k, b in enumerate(out):
        assert frames[b].max() * len(b) <= limit
        if k + 1 < len(out):  # greedy: the next utterance would not have fitted
            grown = np.concatenate([b, out[k + 1][:1]])
            assert frames[grown].max() * len(grown) > limit


def test_dynamic_batches_put_an_overlong_utterance_alone():
    frames = np.array([100, 5000, 100, 100])
    out = dynamic_batches(np.arange(4), frames, 1000)
    assert [b.tolist() for b in out] == [[0], [1], [2, 3]]


def test_bucket_batches_follow_wenet_bucket_semantics():
    frames = np.array([10, 250, 30, 120, 20, 110, 40, 500, 130, 15])
    out = bucket_batches(np.arange(10), frames, [100, 200], [2, 3, 4])
    # bucket 0 (<100): 0, 2 | 4, 6 | 9 ; bucket 1 (<200): 3, 5, 8 ; bucket 2: 1, 7
    assert [b.tolist() for b in out] == [[0, 2], [4, 6], [3, 5, 8], [9], [1, 7]]


def test_bucket_batches_need_one_size_per_bucket():
    with pytest.raises(ValueError, match="needs 3 entries"):
        bucket_batches(np.arange(3), np.ones(3, dtype=np.int64), [100, 200], [2, 3])


@pytest.mark.parametrize("sizes,multiple", [([4, 4, 4, 1, 3], 4), ([5, 2, 2], 2), ([2, 2, 2, 2, 2], 3),
                                           ([7], 5), ([1, 1, 1], 2), ([3, 3, 3, 3], 4)])
def test_split_to_multiple_keeps_every_utterance_once(sizes, multiple):
    batches, start = [], 0
    for n in sizes:
        batches.append(np.arange(start, start + n))
        start += n
    out = split_to_multiple(batches, multiple)
    assert len(out) % multiple == 0
    assert _flat(out) == list(range(start))
    n_empty = sum(1 for b in out if len(b) == 0)
    assert n_empty == max(0, -(-len(batches) // multiple) * multiple - start)
    assert len(out) == -(-len(batches) // multiple) * multiple


def test_split_to_multiple_splits_the_largest_batches_into_adjacent_halves():
    batches = [np.arange(0, 2), np.arange(2, 8), np.arange(8, 12), np.arange(12, 13), np.arange(13, 19)]
    out = split_to_multiple(batches, 7)  # 5 -> 7: split the two 6-utterance batches
    assert [b.tolist() for b in out] == [[0, 1], [2, 3, 4], [5, 6, 7], [8, 9, 10, 11], [12],
                                         [13, 14, 15], [16, 17, 18]]


def test_split_to_multiple_pads_with_empty_batches_only_when_out_of_utterances():
    out = split_to_multiple([np.arange(2)], 4)
    assert [b.tolist() for b in out] == [[0], [1], [], []]
