"""Attention-decoder searches, written in the TorchScript subset of Python (eager decoding
runs them as Python, the exported module compiles them): the state of a batched beam
search and the pieces of n-best rescoring.  They never call the decoder themselves --
TorchScript functions cannot take a module -- :class:`asrkit.decode.searcher.Searcher`
feeds them the decoder's outputs.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from asrkit.models.mask import valid_mask


class AttentionBeamSearch:
    """Left-to-right beam search over a batch, all utterances and beams at once
    (``B · beam`` rows; row ``r`` belongs to utterance ``memory_index[r]``).

    Drive it as ``while not search.done(): logp, cache = decoder.forward_one_step(enc_out,
    search.memory_mask(T), search.ys, cache, search.memory_index); source =
    search.advance(logp); cache = [c[source] for c in cache]``.

    Every row starts as ``prompt`` (``[<sos>]``; Whisper's ``[sot, language, task,
    no_timestamps]``, ``P`` tokens), which is given, not scored.  Score = Σ log P(token)
    of the tokens after the prompt, including the final ``<eos>``; :meth:`best` may divide
    it by a power of the hypothesis length (WeNet's ``length_penalty``).  A hypothesis ends
    at ``<eos>`` (an ended one stays as it is, one more free ``<eos>`` per step) or, as in
    WeNet's ``attention_beam_search`` (whose rows grow to ``T' + 1`` tokens, prompt
    included), when it holds ``enc_lengths[b] + 1 − P`` tokens after the prompt (utterance
    ``b``'s encoder frames), or as many as the decoder's ``max_tokens`` positions leave
    after the prompt: it then stops as it is, without an ``<eos>`` term.  The search stops
    when every kept hypothesis has ended, or when no row may grow.  Among the candidates
    of a step, the ``beam`` best are kept (``topk`` order).
    """

    def __init__(self, enc_lengths: torch.Tensor, beam_size: int, prompt: List[int], eos: int,
                 max_tokens: int = -1):
        if beam_size < 1:
            raise ValueError("beam_size must be >= 1, got {}".format(beam_size))
        device = enc_lengths.device
        self.batch = enc_lengths.size(0)
        self.beam = beam_size
        self.eos = eos
        rows = self.batch * beam_size
        self.memory_index = torch.arange(self.batch, device=device).repeat_interleave(beam_size)
        self.enc_lengths = enc_lengths
        if len(prompt) == 0:
            raise ValueError("the decoder's prompt needs at least its <sos> token")
        self.prompt_length = len(prompt)
        limit = enc_lengths.repeat_interleave(beam_size) + 1 - self.prompt_length
        if max_tokens > 0:  # a decoder with a fixed number of positions (Whisper's 448)
            limit = limit.clamp(max=max_tokens - self.prompt_length)
        self.limit = limit
        self.max_steps = max(int(self.limit.max()), 0) if rows > 0 else 0
        self.ys = torch.tensor(prompt, dtype=torch.long, device=device).unsqueeze(0).repeat(rows, 1)
        scores = torch.full((self.batch, beam_size), float("-inf"), device=device)
        scores[:, 0] = 0.0
        self.scores = scores.view(-1)
        self.ended = torch.zeros(rows, dtype=torch.bool, device=device)
        self.base = (torch.arange(self.batch, device=device) * beam_size).unsqueeze(1)
        self.eos_only = torch.jit.annotate(Optional[torch.Tensor], None)
        self.step = 0

    def memory_mask(self, frames: int) -> torch.Tensor:
        """``[rows, 1, frames]``: the valid encoder frames of each row's utterance."""
        return valid_mask(self.enc_lengths, frames).unsqueeze(1).index_select(0, self.memory_index)

    def done(self) -> bool:
        return self.step >= self.max_steps or bool(self.ended.all())

    def advance(self, logp: torch.Tensor) -> torch.Tensor:
        """Extend every row by the decoder's next-token log-probabilities ``logp [rows, V]``
        and keep the ``beam`` best per utterance.  Returns, per new row, the row it
        continues (reorder the decoder cache with it)."""
        vocab = logp.size(-1)
        eos_only = self.eos_only
        if eos_only is None:
            eos_only = torch.full((vocab,), float("-inf"), device=logp.device)
            eos_only[self.eos] = 0.0
            self.eos_only = eos_only
        stopped = self.ended | (self.limit <= self.step)  # ended, or as long as the utterance's encoder output
        logp = torch.where(stopped.unsqueeze(1), eos_only, logp)
        candidates = (self.scores.unsqueeze(1) + logp).view(self.batch, self.beam * vocab)
        top_scores, top_index = candidates.topk(self.beam, dim=1)
        source = (self.base + torch.div(top_index, vocab, rounding_mode="floor")).view(-1)
        tokens = (top_index % vocab).view(-1, 1)
        self.ys = torch.cat([self.ys[source], tokens], dim=1)
        self.scores = top_scores.view(-1)
        self.ended = self.ended[source] | (tokens.view(-1) == self.eos)
        self.step += 1
        return source

    def best(self, length_penalty: float = 0.0) -> Tuple[List[List[int]], List[float]]:
        """Per utterance, the best hypothesis (tokens without the prompt and ``<eos>``; ties:
        the earlier row) and its score.

        With ``length_penalty`` ``p`` (WeNet's ``attention_beam_search``), hypotheses are
        ranked by ``score / n ** p``, ``n`` = its tokens (the prompt and ``<eos>`` not
        counted), and that ratio is the score returned; ``p = 0`` is the plain score.  A
        larger ``p`` favours longer hypotheses (scores are negative).  As in WeNet, an empty
        hypothesis (``n = 0``) with ``p > 0`` gets ``score / 0``: ``-inf`` for any
        negative score.  ``p < 0`` raises ``ValueError``."""
        if length_penalty < 0.0:
            raise ValueError("length_penalty must be >= 0, got {}".format(length_penalty))
        ranked = self.scores
        if length_penalty > 0.0:
            lengths = (self.ys[:, self.prompt_length:] != self.eos).sum(dim=1).to(ranked.dtype)
            ranked = ranked / lengths.pow(length_penalty)
        best = ranked.view(self.batch, self.beam).argmax(dim=1) + self.base.view(-1)
        hyps: List[List[int]] = []
        scores: List[float] = []
        rows: List[int] = best.tolist()
        for row in rows:
            seq: List[int] = self.ys[row, self.prompt_length:].tolist()
            end = len(seq)
            for i in range(len(seq)):
                if seq[i] == self.eos:
                    end = i
                    break
            hyps.append(seq[:end])
            scores.append(float(ranked[row]))
        return hyps, scores


def decoder_inputs(hyps: List[List[int]], prompt: List[int], eos: int, device: torch.device, width: int = 0
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher-forcing tensors for token sequences after the decoder's ``prompt`` (``[<sos>]``,
    or Whisper's ``P`` tokens): ``ys_in`` (prompt + hyp, padded with ``<eos>``), ``ys_out``
    (−1 for the prompt's last ``P − 1`` tokens, which are given, then hyp + ``<eos>``,
    padded with −1), input lengths; ``[N, W]`` each, ``W`` the longest hyp + ``P``, or
    ``width`` when that is more."""
    p = len(prompt)
    for h in hyps:
        width = max(width, len(h) + p)
    rows_in: List[List[int]] = []
    rows_out: List[List[int]] = []
    lengths: List[int] = []
    for h in hyps:
        pad = width - p - len(h)
        rows_in.append(prompt + h + [eos] * pad)
        rows_out.append([-1] * (p - 1) + h + [eos] + [-1] * pad)  # -1: asrkit.models.losses.IGNORE_ID
        lengths.append(len(h) + p)
    return (torch.tensor(rows_in, dtype=torch.long, device=device).view(len(hyps), width),
            torch.tensor(rows_out, dtype=torch.long, device=device).view(len(hyps), width),
            torch.tensor(lengths, dtype=torch.long, device=device))


def reversed_decoder_inputs(hyps: List[List[int]], sos: int, eos: int, device: torch.device, width: int = 0
                            ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The right-to-left decoder's teacher-forcing tensors: :func:`decoder_inputs` of each
    token sequence reversed (``r_ys_in``: ``<sos>`` + the hyp reversed, padded with ``<eos>``;
    ``r_ys_out``: the hyp reversed + ``<eos>``)."""
    reversed_hyps: List[List[int]] = []
    for h in hyps:
        r = h.copy()
        r.reverse()
        reversed_hyps.append(r)
    return decoder_inputs(reversed_hyps, [sos], eos, device, width)


def teacher_forced_scores(logits: torch.Tensor, ys_out: torch.Tensor) -> torch.Tensor:
    """Σ log-softmax(logits)[target] over the positions not padded with −1, per row ``[N]``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    valid = ys_out != -1
    picked = logp.gather(-1, ys_out.masked_fill(~valid, 0).unsqueeze(-1)).squeeze(-1)
    return (picked * valid).sum(-1)


def flatten_nbest(nbest: List[List[List[int]]]) -> Tuple[List[List[int]], List[int]]:
    """All utterances' hypotheses in one list, and the utterance each came from."""
    flat: List[List[int]] = []
    owner: List[int] = []
    for b in range(len(nbest)):
        for h in nbest[b]:
            flat.append(h)
            owner.append(b)
    return flat, owner


def group_scores(flat_scores: List[float], nbest: List[List[List[int]]]) -> List[List[float]]:
    """``flat_scores`` (in :func:`flatten_nbest` order) split back per utterance."""
    out: List[List[float]] = []
    position = 0
    for b in range(len(nbest)):
        out.append(flat_scores[position: position + len(nbest[b])])
        position += len(nbest[b])
    return out


def rescored_totals(nbest: List[List[List[int]]], ctc_scores: List[List[float]],
                    decoder_scores: List[List[float]], ctc_weight: float,
                    extra_scores: Optional[List[List[float]]], b: int) -> List[float]:
    """Utterance ``b``'s rescoring total of each n-best entry: ``decoder score + ctc_weight ·
    CTC score`` (+ its ``extra_scores`` entry: LM and context scores,
    :mod:`asrkit.decode.fusion`) -- what :func:`pick_rescored` maximises and
    :func:`rank_rescored` sorts by."""
    totals: List[float] = []
    for i in range(len(nbest[b])):
        total = decoder_scores[b][i] + ctc_weight * ctc_scores[b][i]
        if extra_scores is not None:
            total = total + extra_scores[b][i]
        totals.append(total)
    return totals


def pick_rescored(nbest: List[List[List[int]]], ctc_scores: List[List[float]],
                  decoder_scores: List[List[float]], ctc_weight: float,
                  extra_scores: Optional[List[List[float]]] = None) -> Tuple[List[List[int]], List[float]]:
    """Per utterance, the n-best entry maximising ``decoder score + ctc_weight · CTC score``
    (+ its ``extra_scores`` entry: LM and context scores, :mod:`asrkit.decode.fusion`)
    (ties: the earlier entry) and that total; the empty hypothesis with score 0.0 for an
    empty n-best list."""
    hyps: List[List[int]] = []
    totals: List[float] = []
    for b in range(len(nbest)):
        best_index = -1
        best_total = 0.0
        for i, total in enumerate(rescored_totals(nbest, ctc_scores, decoder_scores, ctc_weight, extra_scores, b)):
            if best_index < 0 or total > best_total:
                best_index = i
                best_total = total
        if best_index < 0:
            empty: List[int] = []
            hyps.append(empty)
        else:
            hyps.append(nbest[b][best_index])
        totals.append(best_total)
    return hyps, totals


def rank_rescored(nbest: List[List[List[int]]], ctc_scores: List[List[float]],
                  decoder_scores: List[List[float]], ctc_weight: float,
                  extra_scores: Optional[List[List[float]]] = None) -> List[List[List[int]]]:
    """Per utterance, the n-best entries ranked by the total :func:`pick_rescored` maximises,
    best first (ties: the earlier entry, so the first is :func:`pick_rescored`'s choice); ``[[]]``
    for an empty n-best list (pick_rescored's empty hypothesis)."""
    out: List[List[List[int]]] = []
    for b in range(len(nbest)):
        totals = rescored_totals(nbest, ctc_scores, decoder_scores, ctc_weight, extra_scores, b)
        order = sorted(range(len(totals)), key=lambda i: -totals[i])  # (stable: ties keep their order)
        out.append([list(nbest[b][i]) for i in order] or [[]])
    return out
