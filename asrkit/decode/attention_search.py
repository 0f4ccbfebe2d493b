"""Attention-decoder searches: batched beam search and n-best rescoring."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from asrkit.decode.ctc_search import Hypothesis
from asrkit.models.losses import IGNORE_ID
from asrkit.models.mask import valid_mask


def attention_beam_search(decoder: torch.nn.Module, enc_out: torch.Tensor, enc_lengths: torch.Tensor,
                          beam_size: int, sos: int, eos: int) -> list[Hypothesis]:
    """Left-to-right beam search, all utterances and beams at once (``B · beam`` rows).

    Score = Σ log P(token) including the final ``<eos>``; no length normalisation.
    A hypothesis ends at ``<eos>``; after ``enc_lengths[b]`` tokens utterance ``b``'s
    hypotheses can only continue with ``<eos>`` (scored at its probability).  Search stops when every kept hypothesis has ended.
    Returns the best hypothesis of each utterance (tokens without ``<sos>``/``<eos>``).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    batch = enc_out.size(0)
    device = enc_out.device
    k = beam_size
    rows = batch * k
    memory_index = torch.arange(batch, device=device).repeat_interleave(k)  # row -> utterance
    memory_mask = valid_mask(enc_lengths, enc_out.size(1)).unsqueeze(1).index_select(0, memory_index)
    limit = enc_lengths.repeat_interleave(k)
    ys = torch.full((rows, 1), sos, dtype=torch.long, device=device)
    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0
    scores = scores.view(-1)
    ended = torch.zeros(rows, dtype=torch.bool, device=device)
    cache: Optional[list[torch.Tensor]] = None
    vocab = -1
    eos_only: Optional[torch.Tensor] = None
    base = (torch.arange(batch, device=device) * k).unsqueeze(1)
    for step in range(int(limit.max()) + 1 if rows else 0):
        logp, cache = decoder.forward_one_step(enc_out, memory_mask, ys, cache, memory_index)
        if eos_only is None:
            vocab = logp.size(-1)
            eos_only = torch.full((vocab,), float("-inf"), device=device)
            eos_only[eos] = 0.0
        # at the length limit only <eos> may follow (at its own probability);
        # an ended hypothesis stays as it is (one more free <eos>)
        at_limit = (limit <= step).unsqueeze(1)
        logp = torch.where(at_limit, eos_only + logp, logp)
        logp = torch.where(ended.unsqueeze(1), eos_only, logp)
        candidates = (scores.unsqueeze(1) + logp).view(batch, k * vocab)
        top_scores, top_index = candidates.topk(k, dim=1)
        source = (base + torch.div(top_index, vocab, rounding_mode="floor")).view(-1)
        tokens = (top_index % vocab).view(-1, 1)
        ys = torch.cat([ys[source], tokens], dim=1)
        cache = [c[source] for c in cache]
        scores = top_scores.view(-1)
        ended = ended[source] | (tokens.view(-1) == eos)
        if bool(ended.all()):
            break
    best = scores.view(batch, k).argmax(dim=1) + torch.arange(batch, device=device) * k
    results = []
    for row in best.tolist():
        seq = ys[row, 1:].tolist()
        if eos in seq:
            seq = seq[: seq.index(eos)]
        results.append(Hypothesis(tuple(seq), float(scores[row])))
    return results


def _teacher_forced_scores(decoder_logits: torch.Tensor, ys_out: torch.Tensor) -> torch.Tensor:
    """Σ log-softmax(logits)[target] over non-ignored positions, per row ``[N]``."""
    logp = torch.log_softmax(decoder_logits.float(), dim=-1)
    valid = ys_out != IGNORE_ID
    picked = logp.gather(-1, ys_out.masked_fill(~valid, 0).unsqueeze(-1)).squeeze(-1)
    return (picked * valid).sum(-1)


def _decoder_io(hyps: Sequence[Sequence[int]], sos_eos: int, device: torch.device
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``ys_in`` (``<sos>`` + hyp, padded with ``<eos>``), ``ys_out`` (hyp + ``<eos>``,
    padded with −1) and input lengths, for a list of token sequences."""
    width = max(len(h) for h in hyps) + 1
    ys_in = torch.full((len(hyps), width), sos_eos, dtype=torch.long)
    ys_out = torch.full((len(hyps), width), IGNORE_ID, dtype=torch.long)
    for i, h in enumerate(hyps):
        if h:
            seq = torch.tensor(list(h), dtype=torch.long)
            ys_in[i, 1: len(h) + 1] = seq
            ys_out[i, : len(h)] = seq
        ys_out[i, len(h)] = sos_eos
    lengths = torch.tensor([len(h) + 1 for h in hyps], dtype=torch.long)
    return ys_in.to(device), ys_out.to(device), lengths.to(device)


def rescoring_scores(decoder: torch.nn.Module, enc_out: torch.Tensor, enc_lengths: torch.Tensor,
                     nbest: Sequence[Sequence[Hypothesis]], sos_eos: int, reverse_weight: float
                     ) -> list[list[float]]:
    """Decoder score of every hypothesis: ``(1 − rw) · log P_l2r(y <eos>) + rw · log P_r2l(reverse(y) <eos>)``,
    all utterances' hypotheses in one decoder call."""
    owner = [b for b, hyps in enumerate(nbest) for _ in hyps]
    flat = [h.tokens for hyps in nbest for h in hyps]
    if not flat:
        return [[] for _ in nbest]
    device = enc_out.device
    index = torch.tensor(owner, dtype=torch.long, device=device)
    memory_mask = valid_mask(enc_lengths[index], enc_out.size(1)).unsqueeze(1)
    ys_in, ys_out, lengths = _decoder_io(flat, sos_eos, device)
    r_ys_in: Optional[torch.Tensor] = None
    r_ys_out: Optional[torch.Tensor] = None
    if reverse_weight > 0.0:
        r_ys_in, r_ys_out, _ = _decoder_io([tuple(reversed(h)) for h in flat], sos_eos, device)
    logits, r_logits = decoder(enc_out, memory_mask, ys_in, lengths, r_ys_in, index)
    score = _teacher_forced_scores(logits, ys_out)
    if reverse_weight > 0.0:
        if r_logits is None or r_ys_out is None:
            raise ValueError("reverse_weight > 0 needs a bidirectional decoder")
        score = (1.0 - reverse_weight) * score + reverse_weight * _teacher_forced_scores(r_logits, r_ys_out)
    flat_scores = score.tolist()
    out: list[list[float]] = [[] for _ in nbest]
    for b, s in zip(owner, flat_scores):
        out[b].append(s)
    return out


def attention_rescoring(decoder: torch.nn.Module, enc_out: torch.Tensor, enc_lengths: torch.Tensor,
                        nbest: Sequence[Sequence[Hypothesis]], sos_eos: int, ctc_weight: float,
                        reverse_weight: float) -> list[Hypothesis]:
    """Pick, per utterance, the n-best hypothesis maximising
    ``decoder score (see rescoring_scores) + ctc_weight · CTC score`` (ties: earlier
    n-best entry).  An utterance with an empty n-best list gets the empty hypothesis."""
    decoder_scores = rescoring_scores(decoder, enc_out, enc_lengths, nbest, sos_eos, reverse_weight)
    results = []
    for hyps, scores in zip(nbest, decoder_scores):
        best: Optional[Hypothesis] = None
        for hyp, s in zip(hyps, scores):
            total = s + ctc_weight * hyp.score
            if best is None or total > best.score:
                best = Hypothesis(hyp.tokens, total)
        results.append(best if best is not None else Hypothesis((), 0.0))
    return results
