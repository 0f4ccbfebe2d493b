"""PrefixBeamSearch is incremental: fed an utterance's log-probabilities whole or in chunks
of any size (eager or compiled by TorchScript), it gives bit-identical n-best lists and
scores to the batch search."""
from typing import List, Tuple

import pytest
import torch

from asrkit.decode.ctc_search import PrefixBeamSearch, ctc_prefix_beam_search_nbest


def feed_in_chunks(log_probs: torch.Tensor, chunk: int, beam_size: int, blank: int,
                   threshold: float) -> Tuple[List[List[int]], List[float]]:
    search = PrefixBeamSearch(beam_size, blank, log_probs.size(1), threshold)
    for start in range(0, log_probs.size(0), chunk):
        search.feed(log_probs[start:start + chunk])
        search.nbest()  # a partial result leaves the state as it is
    return search.nbest()


def posteriors(trial: int, g: torch.Generator, vocab: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    t = int(torch.randint(1, 40, (1,), generator=g))
    logits = torch.randn(2, t, vocab, generator=g) * float(torch.rand(1, generator=g) * 6)
    if trial % 3 == 0:
        logits = logits.round()  # exact ties: order of first appearance must be kept
    if trial % 2 == 0:
        logits[:, :, 0] += 9.0 * (torch.rand(2, t, generator=g) > 0.5)  # P(blank) > 0.999 frames
    lengths = torch.tensor([t, int(torch.randint(0, t + 1, (1,), generator=g))])
    return torch.log_softmax(logits, -1), lengths


def test_chunked_feeding_equals_the_batch_search_bit_for_bit():
    g = torch.Generator().manual_seed(11)
    scripted = torch.jit.script(feed_in_chunks)
    compared = 0
    for trial in range(60):
        log_probs, lengths = posteriors(trial, g)
        beam = int(torch.randint(1, 9, (1,), generator=g))
        threshold = [0.999, 1.0, 0.9][trial % 3]
        hyps, scores = ctc_prefix_beam_search_nbest(log_probs, lengths, beam, 0, threshold)
        for b, n in enumerate(lengths.tolist()):
            for chunk in (1, 2, 3, 7, max(n, 1)):
                expected = (hyps[b], scores[b])
                assert feed_in_chunks(log_probs[b, :n], chunk, beam, 0, threshold) == expected, (trial, chunk)
                if chunk in (1, 3):
                    assert scripted(log_probs[b, :n], chunk, beam, 0, threshold) == expected, (trial, chunk)
                compared += len(hyps[b])
    assert compared > 500


def test_blank_is_an_argument():
    """With the blank at another id the search is the same search, ids permuted."""
    g = torch.Generator().manual_seed(3)
    log_probs = torch.log_softmax(torch.randn(1, 25, 6, generator=g) * 3, -1)
    permutation = torch.tensor([3, 1, 2, 0, 4, 5])  # swap ids 0 and 3
    moved = log_probs[..., permutation]
    lengths = torch.tensor([25])
    hyps, scores = ctc_prefix_beam_search_nbest(log_probs, lengths, 4, 0, 1.0)
    moved_hyps, moved_scores = ctc_prefix_beam_search_nbest(moved, lengths, 4, 3, 1.0)
    swap = {0: 3, 3: 0}
    assert moved_hyps[0] == [[swap.get(t, t) for t in h] for h in hyps[0]]
    assert moved_scores == scores


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        PrefixBeamSearch(0, 0, 5)
    with pytest.raises(ValueError, match="blank id 5 outside a vocabulary of 5"):
        PrefixBeamSearch(2, 5, 5)
    with pytest.raises(ValueError, match=r"feed takes log-probabilities \[T, 5\]"):
        PrefixBeamSearch(2, 0, 5).feed(torch.zeros(3, 6))
