"""asrkit.decode.alignment on hand-made log-probabilities whose spikes are known frame by
frame: the best path's spans, the Viterbi spans of other token sequences (repeats need a
blank between them, the path may leave the argmax), and agreement with the greedy search."""
from __future__ import annotations

import pytest
import torch

from asrkit.decode.alignment import AlignmentError, TokenSpan, best_path_spans, forced_alignment
from asrkit.decode.ctc_search import ctc_greedy_search

B = 0  # blank


def posteriors(rows: list[dict]) -> torch.Tensor:
    """``[T, 5]`` log-probabilities: each row gives some ids a probability, the rest of the
    mass is spread evenly over the other ids."""
    out = []
    for row in rows:
        rest = (1.0 - sum(row.values())) / (5 - len(row))
        out.append([row.get(v, rest) for v in range(5)])
    return torch.tensor(out).log()


# frames:  0      1       2       3      4      5       6      7       8       9
ROWS = [{B: .9}, {1: .8}, {1: .7}, {B: .9}, {B: .6, 3: .3}, {2: .8}, {B: .9}, {2: .6, 3: .3}, {2: .7}, {B: .9}]


def test_best_path_spans_are_the_argmax_runs():
    spans = best_path_spans(posteriors(ROWS), B)
    assert spans == [TokenSpan(1, 1, 3), TokenSpan(2, 5, 6), TokenSpan(2, 7, 9)]


def test_forced_alignment_of_the_best_path_tokens_is_the_best_path():
    assert forced_alignment(posteriors(ROWS), [1, 2, 2], B) == best_path_spans(posteriors(ROWS), B)


def test_forced_alignment_follows_the_tokens_it_is_given():
    lp = posteriors(ROWS)
    # one "2" only: on frames 5-8 the best path holding a single 2 is blank 5, blank 6, 2 on
    # 7-8 (.05 * .9 * .6 * .7 = .0189), not 2 on 5 then blanks (.8 * .9 * .033 * .075 = .0018)
    # nor 2 held from 5 to 8 (.8 * .025 * .6 * .7 = .0084)
    assert forced_alignment(lp, [1, 2], B) == [TokenSpan(1, 1, 3), TokenSpan(2, 7, 9)]
    # a token the argmax never shows: 3 takes frame 4 (0.3 there against the blank's 0.6)
    assert forced_alignment(lp, [1, 3, 2, 2], B) == [TokenSpan(1, 1, 3), TokenSpan(3, 4, 5), TokenSpan(2, 5, 6),
                                                      TokenSpan(2, 7, 9)]


def test_equal_neighbours_need_a_blank_between_them():
    lp = posteriors([{4: .9}, {4: .9}, {4: .9}])  # no blank anywhere
    assert forced_alignment(lp, [4, 4], B) == [TokenSpan(4, 0, 1), TokenSpan(4, 2, 3)]
    assert best_path_spans(lp, B) == [TokenSpan(4, 0, 3)]  # the argmax merges them
    with pytest.raises(AlignmentError):
        forced_alignment(lp[:2], [4, 4], B)  # 2 frames cannot hold "4 <b> 4"
    with pytest.raises(AlignmentError):
        forced_alignment(lp, [1, 2, 3, 4], B)  # more tokens than frames
    assert forced_alignment(lp, [], B) == []


def test_agrees_with_the_greedy_search_on_random_posteriors():
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        frames = int(torch.randint(1, 30, (1,), generator=gen))
        lp = torch.log_softmax(3.0 * torch.randn(frames, 5, generator=gen), dim=-1)
        spans = best_path_spans(lp, B)
        greedy = ctc_greedy_search(lp.unsqueeze(0), torch.tensor([frames]), B)[0]
        assert [s.token for s in spans] == greedy
        assert forced_alignment(lp, greedy, B) == spans
        assert all(0 <= s.start < s.end <= frames for s in spans)
