import itertools
import math

import pytest
import torch

from asrkit.decode.ctc_search import apply_blank_penalty, ctc_greedy_search, ctc_prefix_beam_search, log_add


def random_log_probs(batch: int, frames: int, vocab: int, seed: int, sharpness: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(sharpness * torch.randn(batch, frames, vocab, generator=g), dim=-1)


def collapse(path) -> tuple:
    out, prev = [], None
    for s in path:
        if s != prev and s != 0:
            out.append(s)
        prev = s
    return tuple(out)


def brute_force(log_probs: torch.Tensor) -> dict:
    """P(labels) for every label sequence, summing over all V^T paths."""
    frames, vocab = log_probs.shape
    totals: dict = {}
    for path in itertools.product(range(vocab), repeat=frames):
        lp = sum(float(log_probs[t, s]) for t, s in enumerate(path))
        key = collapse(path)
        totals[key] = log_add(totals.get(key, float("-inf")), lp)
    return totals


def test_greedy_collapses_repeats_and_blanks_within_length():
    ids = torch.tensor([[1, 1, 0, 1, 2, 2, 0, 0, 3, 3]])
    lp = torch.log_softmax(torch.nn.functional.one_hot(ids, 5).float() * 10, dim=-1)
    assert ctc_greedy_search(lp, torch.tensor([10])) == [[1, 1, 2, 3]]
    assert ctc_greedy_search(lp, torch.tensor([5])) == [[1, 1, 2]]


@pytest.mark.parametrize("seed", range(5))
def test_prefix_beam_search_beam_one_equals_greedy(seed):
    lp = random_log_probs(4, 40, 7, seed, sharpness=2.0)
    lengths = torch.tensor([40, 31, 17, 3])
    beam = ctc_prefix_beam_search(lp, lengths, beam_size=1, blank_skip_threshold=1.0)
    assert [list(h[0].tokens) for h in beam] == ctc_greedy_search(lp, lengths)


@pytest.mark.parametrize("seed", range(3))
def test_prefix_beam_search_best_matches_brute_force(seed):
    lp = random_log_probs(1, 7, 3, seed, sharpness=1.5)[0]
    exact = brute_force(lp)
    hyps = ctc_prefix_beam_search(lp.unsqueeze(0), torch.tensor([7]), beam_size=200,
                                  blank_skip_threshold=1.0)[0]
    best_labels, best_score = max(exact.items(), key=lambda kv: kv[1])
    assert hyps[0].tokens == best_labels
    assert hyps[0].score == pytest.approx(best_score, abs=1e-4)
    for h in hyps:  # every prefix kept has its exact probability
        assert h.score == pytest.approx(exact[h.tokens], abs=1e-4)
    assert math.log(sum(math.exp(v) for v in exact.values())) == pytest.approx(0.0, abs=1e-4)


def test_blank_skipping_keeps_result_on_peaky_posteriors():
    g = torch.Generator().manual_seed(0)
    frames, vocab = 60, 9
    logits = torch.randn(frames, vocab, generator=g)
    logits[:, 0] += torch.where(torch.rand(frames, generator=g) < 0.7, 12.0, 0.0)  # mostly blank
    lp = torch.log_softmax(logits, -1).unsqueeze(0)
    exact = ctc_prefix_beam_search(lp, torch.tensor([frames]), 10, blank_skip_threshold=1.0)[0]
    skipped = ctc_prefix_beam_search(lp, torch.tensor([frames]), 10, blank_skip_threshold=0.999)[0]
    assert skipped[0].tokens == exact[0].tokens
    assert skipped[0].score == pytest.approx(exact[0].score, abs=1e-2)


def test_bad_beam_is_a_clear_error():
    with pytest.raises(ValueError, match="beam_size"):
        ctc_prefix_beam_search(random_log_probs(1, 3, 3, 0), torch.tensor([3]), beam_size=0)


def test_blank_penalty_is_wenets_lowered_blank_logit_and_a_renormalised_log_prob_shift():
    g = torch.Generator().manual_seed(0)
    logits = 3.0 * torch.randn(2, 9, 6, generator=g)
    lp = torch.log_softmax(logits, dim=-1)
    for blank in (0, 2):
        got = apply_blank_penalty(lp, blank, 1.5)
        wenet = logits.clone()
        wenet[:, :, blank] -= 1.5  # WeNet's ctc_logprobs: the logit lowered, then log-softmax
        torch.testing.assert_close(got, torch.log_softmax(wenet, dim=-1), atol=1e-5, rtol=0)
        shifted = lp.clone()
        shifted[:, :, blank] -= 1.5  # the same: the log-probability lowered, renormalised
        torch.testing.assert_close(got, shifted - shifted.logsumexp(-1, keepdim=True), atol=1e-5, rtol=0)
        assert (got[:, :, blank] < lp[:, :, blank]).all()
    assert apply_blank_penalty(lp, 0, 0.0) is lp
    with pytest.raises(ValueError, match="blank_penalty must be >= 0"):
        apply_blank_penalty(lp, 0, -0.5)


def test_blank_penalty_turns_blank_frames_into_tokens():
    """Frames where the blank beats the runner-up token by log(0.8/0.15): without a
    penalty no token is emitted; a penalty above that margin makes both searches emit one
    per run of frames."""
    probs = torch.tensor([[0.8, 0.15, 0.05]] * 2 + [[0.9, 0.05, 0.05]] * 2 + [[0.8, 0.05, 0.15]] * 2)
    lp = probs.log().unsqueeze(0)
    lengths = torch.tensor([6])
    assert ctc_greedy_search(lp, lengths) == [[]]
    assert ctc_prefix_beam_search(lp, lengths, 3, blank_skip_threshold=1.0)[0][0].tokens == ()
    margin = math.log(0.8 / 0.15)
    penalised = apply_blank_penalty(lp, 0, margin + 0.1)
    assert ctc_greedy_search(penalised, lengths) == [[1, 2]]
    assert ctc_prefix_beam_search(penalised, lengths, 3, blank_skip_threshold=1.0)[0][0].tokens == (1, 2)
    blanks = lambda x: int((x.argmax(-1) == 0).sum())  # noqa: E731
    assert blanks(penalised) < blanks(lp)
    assert ctc_greedy_search(apply_blank_penalty(lp, 0, margin - 0.1), lengths) == [[]]
