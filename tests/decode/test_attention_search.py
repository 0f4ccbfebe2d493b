import math

import pytest
import torch

from asrkit.decode import attention_beam_search, attention_rescoring
from asrkit.decode.attention_search import AttentionBeamSearch
from asrkit.decode.ctc_search import Hypothesis, ctc_prefix_beam_search
from asrkit.models.mask import valid_mask
from tests.models.tiny import random_batch, tiny_model


def encode(model, lengths):
    feats, feats_lengths, _, _ = random_batch(lengths, seed=5)
    with torch.no_grad():
        return model.encode(feats, feats_lengths)


def greedy_step_by_step(model, enc_out, enc_length):
    """Recompute the whole prefix with the teacher-forced decoder at every step."""
    memory = enc_out.unsqueeze(0)
    memory_mask = valid_mask(enc_length.view(1), enc_out.size(0)).unsqueeze(1)
    ys = [model.sos]
    score = 0.0
    for _ in range(int(enc_length)):  # length limit (WeNet's): as many tokens as encoder frames, no <eos> term
        logits, _ = model.decoder(memory, memory_mask, torch.tensor([ys]), torch.tensor([len(ys)]))
        logp = torch.log_softmax(logits[0, -1], -1)
        token = int(logp.argmax())
        score += float(logp[token])
        if token == model.eos:
            break
        ys.append(token)
    return ys[1:], score


def test_attention_beam_one_equals_step_by_step_greedy():
    # a sharpened output layer makes the greedy path non-trivial (not an immediate <eos>)
    model = tiny_model(vocab_size=9, seed=3).eval()
    with torch.no_grad():
        model.decoder.output_layer.bias[model.eos] -= 3.0
    enc_out, enc_lengths = encode(model, [60, 41, 23])
    with torch.no_grad():
        hyps = attention_beam_search(model.decoder, enc_out, enc_lengths, 1, [model.sos], model.eos)
        for b in range(3):
            tokens, score = greedy_step_by_step(model, enc_out[b], enc_lengths[b])
            assert list(hyps[b].tokens) == tokens
            assert abs(hyps[b].score - score) < 1e-3
    assert any(len(h.tokens) > 1 for h in hyps)


def test_attention_beam_search_same_alone_and_in_batch():
    model = tiny_model(vocab_size=9, seed=4).eval()
    with torch.no_grad():
        model.decoder.output_layer.bias[model.eos] -= 2.0
    enc_out, enc_lengths = encode(model, [60, 41, 23])
    with torch.no_grad():
        batch = attention_beam_search(model.decoder, enc_out, enc_lengths, 4, [model.sos], model.eos)
        for b in range(3):
            n = int(enc_lengths[b])
            alone = attention_beam_search(model.decoder, enc_out[b:b + 1, :n], enc_lengths[b:b + 1], 4,
                                          [model.sos], model.eos)[0]
            assert alone.tokens == batch[b].tokens
            assert abs(alone.score - batch[b].score) < 1e-3
            assert len(alone.tokens) <= n


def independent_score(model, enc_out, enc_length, tokens, reverse_weight):
    memory = enc_out[: int(enc_length)].unsqueeze(0)
    mask = torch.ones(1, 1, memory.size(1), dtype=torch.bool)

    def sequence_logp(decoder, seq):
        ys_in = torch.tensor([[model.sos] + list(seq)])
        logits = decoder.forward_logits(memory, mask, ys_in, torch.tensor([len(seq) + 1]))
        logp = torch.log_softmax(logits[0], -1)
        return sum(float(logp[i, t]) for i, t in enumerate(list(seq) + [model.eos]))

    left = sequence_logp(model.decoder.left_decoder, tokens)
    right = sequence_logp(model.decoder.right_decoder, tuple(reversed(tokens)))
    return (1 - reverse_weight) * left + reverse_weight * right


def test_attention_rescoring_picks_the_best_independently_scored_hypothesis():
    model = tiny_model(vocab_size=9, seed=6, decoder="bitransformer", decoder_conf={"r_num_blocks": 1},
                       model_conf={"reverse_weight": 0.3}).eval()
    enc_out, enc_lengths = encode(model, [50, 35])
    ctc_weight, reverse_weight = 0.5, 0.3
    with torch.no_grad():
        nbest = ctc_prefix_beam_search(model.ctc_log_probs(enc_out), enc_lengths, 6)
        nbest[1] = nbest[1] + [Hypothesis((), -50.0)]  # an empty hypothesis must be scorable too
        best = attention_rescoring(model.decoder, enc_out, enc_lengths, nbest, [model.sos], model.eos,
                                   ctc_weight, reverse_weight)
        for b in range(2):
            totals = [independent_score(model, enc_out[b], enc_lengths[b], h.tokens, reverse_weight)
                      + ctc_weight * h.score for h in nbest[b]]
            winner = max(range(len(totals)), key=totals.__getitem__)
            assert best[b].tokens == nbest[b][winner].tokens
            assert abs(best[b].score - totals[winner]) < 1e-3
            assert len(set(h.tokens for h in nbest[b])) > 1


A, B, C, EOS = 1, 2, 3, 4  # a 5-unit vocabulary; <sos> = <eos> = 4 as in every asrkit layout
NEXT = {(): {A: 0.6, B: 0.4}, (A,): {EOS: 0.7, C: 0.3}, (B,): {C: 0.9, EOS: 0.1}, (B, C): {EOS: 0.95, A: 0.05}}


def scripted_search(frames: int = 5) -> AttentionBeamSearch:
    """Beam 2 over the next-token table ``NEXT`` (other tokens: 1e-9): the kept
    hypotheses end as ``a <eos>`` (0.6 · 0.7) and ``b c <eos>`` (0.4 · 0.9 · 0.95)."""
    search = AttentionBeamSearch(torch.tensor([frames]), 2, prompt=[EOS], eos=EOS)
    while not search.done():
        rows = []
        for seq in search.ys[:, 1:].tolist():
            seq = tuple(t for t in seq if t != EOS)
            probs = torch.full((5,), 1e-9)
            for token, p in NEXT.get(seq, {EOS: 1.0}).items():
                probs[token] = p
            rows.append(probs.log())
        search.advance(torch.stack(rows))
    return search


def test_length_penalty_divides_by_tokens_to_the_power_and_favours_the_longer_hypothesis():
    short, long = math.log(0.6 * 0.7), math.log(0.4 * 0.9 * 0.95)  # 1 token vs 2, <eos> not counted
    hyps, scores = scripted_search().best()
    assert hyps == [[A]] and scores[0] == pytest.approx(short, abs=1e-5)
    assert scripted_search().best(0.0) == (hyps, scores)
    hyps, scores = scripted_search().best(1.0)
    assert hyps == [[B, C]] and scores[0] == pytest.approx(long / 2, abs=1e-5)
    hyps, scores = scripted_search().best(0.2)  # 2 ** 0.2 too small to overturn the raw scores
    assert hyps == [[A]] and scores[0] == pytest.approx(short, abs=1e-5)
    with pytest.raises(ValueError, match="length_penalty must be >= 0"):
        scripted_search().best(-1.0)


def test_length_penalty_never_shortens_the_chosen_hypothesis():
    """The final beam does not depend on the penalty, only its ranking: a larger penalty
    picks a hypothesis at least as long, per utterance, and here a longer one somewhere."""
    model = tiny_model(vocab_size=9, seed=3).eval()
    with torch.no_grad():
        model.decoder.output_layer.bias[model.eos] += 1.0  # <eos> tempting early: short hypotheses win
    enc_out, enc_lengths = encode(model, [60, 41, 23, 50])
    lengths = []
    with torch.no_grad():
        for penalty in (0.0, 0.5, 1.0, 3.0):
            hyps = attention_beam_search(model.decoder, enc_out, enc_lengths, 6, [model.sos], model.eos, penalty)
            lengths.append([len(h.tokens) for h in hyps])
    for shorter, longer in zip(lengths, lengths[1:]):
        assert all(a <= b for a, b in zip(shorter, longer)), lengths
    assert sum(lengths[-1]) > sum(lengths[0]), lengths
