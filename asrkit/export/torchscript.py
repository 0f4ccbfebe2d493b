"""TorchScript export of a trained :class:`asrkit.models.AsrModel`.

:class:`ScriptableAsr` wraps the trained submodules (CMVN, encoder, CTC head, decoder)
and the decoding searches in one ``nn.Module`` that ``torch.jit.script`` compiles: the
real model code is scripted (not traced), so any batch size and any input length work.
The searches re-implement :mod:`asrkit.decode.ctc_search` and
:mod:`asrkit.decode.attention_search` in the TorchScript subset of Python with the same
semantics, operation for operation, so the exported module returns the same hypotheses
as eager :func:`asrkit.decode.decode`:

* ``ctc_greedy_search``: per-frame argmax, merge repeats, drop blanks;
* ``ctc_prefix_beam_search``: the ``beam_size`` most likely tokens of each frame extend
  the prefixes; a frame with ``P(blank) > blank_skip_threshold`` creates no new prefix;
  ties keep the order in which prefixes were first met (stable sorts, as Python's);
* ``attention_rescoring``: every n-best hypothesis of the batch in one decoder call,
  score ``(1 − rw)·l2r + rw·r2l + ctc_weight·CTC``, ties to the earlier n-best entry.

Prefixes are kept in a trie of integer node ids (TorchScript dictionaries cannot have
tuple keys): the node of ``prefix + (token,)`` is ``children[node * V + token]``.
Scores are Python floats (doubles) combined with the same ``math`` calls as the eager
search, so n-best scores are bit-identical, not merely close.

The wrapper reaches the model only through its submodules' ``forward`` methods
(``cmvn(x)``, ``encoder(feats, lengths)``, ``ctc(enc_out)``,
``decoder(memory, memory_mask, ys_in, ys_in_lengths, r_ys_in, memory_index)``), so it
follows refactors inside them.

Use :func:`export_model` to build, script, check and save in one call.
"""
from __future__ import annotations

import copy
import io
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from asrkit.decode.ctc_search import DEFAULT_BLANK_SKIP_THRESHOLD
from asrkit.models.cmvn import GlobalCMVN

EXPORT_FORMAT = 1
# Extra files stored in the archive (read with torch.jit.load(path, _extra_files={...})).
EXTRA_CONFIG = "train.yaml"
EXTRA_UNITS = "units.txt"
EXTRA_META = "meta.json"


class ExportCheckError(RuntimeError):
    """The exported module disagrees with the eager model."""


# ----------------------------------------------------------------------------- searches
# Plain functions: scripted as part of ScriptableAsr, and callable from Python as they are.


def log_add(a: float, b: float) -> float:
    """``log(exp(a) + exp(b))``, exact at ``-inf`` (same arithmetic as ctc_search.log_add)."""
    if a < b:
        a, b = b, a
    if b == -math.inf:
        return a
    return a + math.log1p(math.exp(b - a))


def _slot(where: Dict[int, int], nodes: List[int], pb: List[float], pnb: List[float], node: int) -> int:
    """Index of ``node`` in the next-frame beam lists, appended (at −inf, −inf) if new:
    Python's ``dict.setdefault`` keeping insertion order."""
    index = where.get(node, -1)
    if index >= 0:
        return index
    index = len(nodes)
    where[node] = index
    nodes.append(node)
    pb.append(-math.inf)
    pnb.append(-math.inf)
    return index


def _stable_order_desc(scores: List[float]) -> List[int]:
    """Indices sorting ``scores`` in decreasing order, equal scores in their list order
    (what Python's stable ``sorted(..., reverse=True)`` gives).  Done on lists: in
    TorchScript ``torch.tensor(List[float])`` rounds through float32, which would merge
    scores that differ in double precision."""
    groups: Dict[float, List[int]] = {}
    for i in range(len(scores)):
        key = scores[i] + 0.0  # -0.0 -> 0.0: one key per value
        if key in groups:
            groups[key].append(i)
        else:
            groups[key] = [i]
    values = list(groups.keys())
    values.sort(reverse=True)
    order: List[int] = []
    for value in values:
        order.extend(groups[value])
    return order


def prefix_beam_search_one(top_lp: List[List[float]], top_ids: List[List[int]], blank_lp: List[float],
                           skip_lp: float, beam_size: int, blank: int, vocab_size: int
                           ) -> Tuple[List[List[int]], List[float]]:
    """Prefix beam search of one utterance from its per-frame top-k tokens (ids and
    log-probabilities, best first) and blank log-probabilities.  Returns the n-best
    prefixes (best first) and their CTC log-probabilities."""
    parent: List[int] = [-1]   # trie: node 0 is the empty prefix
    last_token: List[int] = [-1]
    children: Dict[int, int] = {}
    beam: List[int] = [0]
    beam_pb: List[float] = [0.0]  # log P(prefix, path ends in blank)
    beam_pnb: List[float] = [-math.inf]  # log P(prefix, path ends in its last token)
    for t in range(len(top_lp)):
        lps = top_lp[t]
        ids = top_ids[t]
        lp_blank = blank_lp[t]
        if lp_blank > skip_lp:
            # blank-dominated frame: prefixes only absorb the blank or repeat their last token
            for i in range(len(beam)):
                last = last_token[beam[i]]
                lp_last = -math.inf
                if last >= 0:
                    for j in range(len(ids)):
                        if ids[j] == last:
                            lp_last = lps[j]
                            break
                pb = beam_pb[i]
                pnb = beam_pnb[i]
                beam_pb[i] = log_add(pb, pnb) + lp_blank
                beam_pnb[i] = pnb + lp_last
            continue
        nodes: List[int] = []
        nxt_pb: List[float] = []
        nxt_pnb: List[float] = []
        where: Dict[int, int] = {}
        for i in range(len(beam)):
            node = beam[i]
            pb = beam_pb[i]
            pnb = beam_pnb[i]
            total = log_add(pb, pnb)
            last = last_token[node]
            for j in range(len(ids)):
                token = ids[j]
                lp = lps[j]
                if token == blank:
                    s = _slot(where, nodes, nxt_pb, nxt_pnb, node)
                    nxt_pb[s] = log_add(nxt_pb[s], total + lp)
                    continue
                key = node * vocab_size + token
                child = children.get(key, -1)
                if child < 0:
                    child = len(parent)
                    children[key] = child
                    parent.append(node)
                    last_token.append(token)
                se = _slot(where, nodes, nxt_pb, nxt_pnb, child)
                if token == last:
                    # a repeat needs a blank in between to start a new token ...
                    nxt_pnb[se] = log_add(nxt_pnb[se], pb + lp)
                    # ... otherwise it continues the prefix's last token
                    ss = _slot(where, nodes, nxt_pb, nxt_pnb, node)
                    nxt_pnb[ss] = log_add(nxt_pnb[ss], pnb + lp)
                else:
                    nxt_pnb[se] = log_add(nxt_pnb[se], total + lp)
        # keep the beam_size best (stable: ties in order of first appearance); a natively
        # sorted copy gives the cut-off, so only the survivors are grouped by score
        scores: List[float] = []
        for s in range(len(nodes)):
            scores.append(log_add(nxt_pb[s], nxt_pnb[s]) + 0.0)  # + 0.0: -0.0 -> 0.0
        cutoff = -1.7976931348623157e308  # unreachable (-inf) prefixes are dropped
        if len(scores) > beam_size:
            ranked = scores.copy()
            ranked.sort(reverse=True)
            cutoff = max(cutoff, ranked[beam_size - 1])
        groups: Dict[float, List[int]] = {}
        for s in range(len(scores)):
            score = scores[s]
            if score >= cutoff:
                if score in groups:
                    groups[score].append(s)
                else:
                    groups[score] = [s]
        values = list(groups.keys())
        values.sort(reverse=True)
        new_beam: List[int] = []
        new_pb: List[float] = []
        new_pnb: List[float] = []
        for value in values:
            for s in groups[value]:
                if len(new_beam) < beam_size:
                    new_beam.append(nodes[s])
                    new_pb.append(nxt_pb[s])
                    new_pnb.append(nxt_pnb[s])
            if len(new_beam) >= beam_size:
                break
        beam = new_beam
        beam_pb = new_pb
        beam_pnb = new_pnb
    final: List[float] = []
    for i in range(len(beam)):
        final.append(log_add(beam_pb[i], beam_pnb[i]))
    hyps: List[List[int]] = []
    hyp_scores: List[float] = []
    for i in _stable_order_desc(final):
        tokens: List[int] = []
        node = beam[i]
        while node > 0:
            tokens.append(last_token[node])
            node = parent[node]
        tokens.reverse()
        hyps.append(tokens)
        hyp_scores.append(final[i])
    return hyps, hyp_scores


def _no_tokens() -> List[int]:
    empty: List[int] = []
    return empty


def _best_of(nbest: List[List[List[int]]]) -> List[List[int]]:
    """The first (best) entry of each n-best list; the empty hypothesis for an empty list."""
    out: List[List[int]] = []
    for hyps in nbest:
        out.append(hyps[0] if len(hyps) > 0 else _no_tokens())
    return out


def _valid_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``[B, max_len]`` bool, True at ``t < lengths[b]``."""
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def _decoder_io(hyps: List[List[int]], sos_eos: int, device: torch.device
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``ys_in`` (``<sos>`` + hyp, padded with ``<eos>``), ``ys_out`` (hyp + ``<eos>``,
    padded with −1) and the input lengths."""
    width = 0
    for h in hyps:
        width = max(width, len(h))
    width += 1
    rows_in: List[List[int]] = []
    rows_out: List[List[int]] = []
    lengths: List[int] = []
    for h in hyps:
        pad = width - 1 - len(h)
        rows_in.append([sos_eos] + h + [sos_eos] * pad)
        rows_out.append(h + [sos_eos] + [-1] * pad)
        lengths.append(len(h) + 1)
    return (torch.tensor(rows_in, dtype=torch.long, device=device),
            torch.tensor(rows_out, dtype=torch.long, device=device),
            torch.tensor(lengths, dtype=torch.long, device=device))


def _teacher_forced_scores(logits: torch.Tensor, ys_out: torch.Tensor) -> torch.Tensor:
    """Σ log-softmax(logits)[target] over the positions not padded with −1, per row."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    valid = ys_out != -1
    picked = logp.gather(-1, ys_out.masked_fill(~valid, 0).unsqueeze(-1)).squeeze(-1)
    return (picked * valid).sum(-1)


# ----------------------------------------------------------------------------- the module


class ScriptableAsr(nn.Module):
    """A trained model plus its searches and metadata, ready for ``torch.jit.script``.

    ``model``: an :class:`asrkit.models.AsrModel` (eval mode; a CTC head is required).
    ``feature_cmvn``: ``(mean, istd)`` of a data-pipeline CMVN (``dataset_conf.cmvn_file``)
    so that the exported module takes raw fbank features in every case; the model's own
    CMVN layer (``cmvn: global_cmvn``) is used as it is.
    """

    def __init__(self, model: nn.Module, units: List[str], *, sample_rate: int, num_mel_bins: int,
                 frame_length: float, frame_shift: float,
                 feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                 unit_separator: str = ""):
        super().__init__()
        if getattr(model, "ctc", None) is None:
            raise ValueError("the exported model decodes with CTC, but this model has no CTC head "
                             "(it was trained with ctc_weight 0)")
        if len(units) != model.vocab_size:
            raise ValueError(f"{len(units)} units, the model has {model.vocab_size} outputs")
        if model.cmvn is not None and feature_cmvn is not None:
            raise ValueError("CMVN given twice: the model has a CMVN layer and a feature CMVN was passed")
        self.cmvn = model.cmvn
        self.feature_cmvn = None if feature_cmvn is None else GlobalCMVN(*feature_cmvn)
        self.encoder = model.encoder
        self.ctc = model.ctc
        self.decoder = model.decoder
        self.vocab = int(model.vocab_size)
        self.sos = int(model.sos)
        self.eos = int(model.eos)
        self.blank = int(model.ctc.blank_id)
        self.unit_table: List[str] = list(units)
        self.separator = unit_separator
        self.subsampling = int(model.encoder.subsampling_rate)
        self.min_frames = int(model.encoder.min_input_length)
        self.context = self.min_frames - 1  # frames an output frame sees beyond its first
        self.bidirectional = bool(model.decoder is not None and model.decoder.has_reverse)
        self.rate = int(sample_rate)
        self.mel_bins = int(num_mel_bins)
        self.frame_length_ms = float(frame_length)
        self.frame_shift_ms = float(frame_shift)

    # ------------------------------------------------------------------ metadata
    @torch.jit.export
    def sos_symbol(self) -> int:
        return self.sos

    @torch.jit.export
    def eos_symbol(self) -> int:
        return self.eos

    @torch.jit.export
    def blank_id(self) -> int:
        return self.blank

    @torch.jit.export
    def vocab_size(self) -> int:
        return self.vocab

    @torch.jit.export
    def units(self) -> List[str]:
        """Unit symbols indexed by id (``<blank>`` 0, ``<unk>`` 1, ..., ``<sos/eos>`` last)."""
        return self.unit_table

    @torch.jit.export
    def unit_separator(self) -> str:
        """How a hypothesis becomes text: its units (``<blank>`` and ``<sos/eos>`` left
        out) joined with this string.  ``""`` (char and BPE units): then ``▁`` becomes a
        space and the ends are stripped; ``" "``: space-separated units
        (``tokenizer_conf.split_with_space``), used as they are."""
        return self.separator

    @torch.jit.export
    def subsampling_rate(self) -> int:
        return self.subsampling

    @torch.jit.export
    def right_context(self) -> int:
        """Input frames an output frame sees beyond its first one (subsampling context)."""
        return self.context

    @torch.jit.export
    def min_input_length(self) -> int:
        """Fewest feature frames giving one encoder frame (shorter input is refused)."""
        return self.min_frames

    @torch.jit.export
    def is_bidirectional_decoder(self) -> bool:
        return self.bidirectional

    @torch.jit.export
    def has_decoder(self) -> bool:
        return self.decoder is not None

    @torch.jit.export
    def sample_rate(self) -> int:
        """Audio is resampled to this rate before the filterbank."""
        return self.rate

    @torch.jit.export
    def num_mel_bins(self) -> int:
        return self.mel_bins

    @torch.jit.export
    def frame_length(self) -> float:
        """Filterbank window in milliseconds."""
        return self.frame_length_ms

    @torch.jit.export
    def frame_shift(self) -> float:
        """Filterbank hop in milliseconds."""
        return self.frame_shift_ms

    @torch.jit.export
    def dither(self) -> float:
        """Decoding uses no dither."""
        return 0.0

    @torch.jit.export
    def energy_floor(self) -> float:
        return 0.0

    # ------------------------------------------------------------------ network
    def forward(self, feats: torch.Tensor, feats_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Raw Kaldi fbank ``[B, T, F]`` (zero-padded) and lengths ``[B]`` ->
        ``(encoder_out [B, T', D], encoder_lengths [B])``, CMVN included."""
        if self.feature_cmvn is not None:
            feats = self.feature_cmvn(feats)
        if self.cmvn is not None:
            feats = self.cmvn(feats)
        return self.encoder(feats, feats_lengths)

    @torch.jit.export
    def ctc_log_probs(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """CTC log-posteriors ``[B, T', V]`` (fp32)."""
        return self.ctc(encoder_out)

    @torch.jit.export
    def ctc_activation(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """WeNet's name for :meth:`ctc_log_probs`."""
        return self.ctc(encoder_out)

    @torch.jit.export
    def forward_attention_decoder(self, hyps: torch.Tensor, hyps_lens: torch.Tensor,
                                  encoder_out: torch.Tensor, reverse_weight: float = 0.0
                                  ) -> Tuple[torch.Tensor, torch.Tensor]:
        """WeNet's rescoring interface for one utterance: ``hyps [N, L]`` start with
        ``<sos>`` (padding any id), ``hyps_lens [N]`` count the ``<sos>``,
        ``encoder_out [1, T', D]`` (all frames valid).  Returns decoder log-probabilities
        ``[N, L, V]`` left-to-right and, when ``reverse_weight > 0`` and the decoder is
        bidirectional, right-to-left over ``<sos>`` + the reversed tokens (else zeros)."""
        decoder = self.decoder
        if decoder is None:
            raise RuntimeError("this model has no attention decoder (it was trained with ctc_weight 1)")
        else:
            if encoder_out.size(0) != 1:
                raise RuntimeError("forward_attention_decoder takes one utterance's encoder_out [1, T, D]")
            n = hyps.size(0)
            index = torch.zeros(n, dtype=torch.long, device=hyps.device)
            memory_mask = torch.ones(n, 1, encoder_out.size(1), dtype=torch.bool, device=encoder_out.device)
            r_hyps: Optional[torch.Tensor] = None
            if reverse_weight > 0.0 and self.bidirectional:
                tokens = hyps[:, 1:]
                token_lens = hyps_lens - 1
                positions = torch.arange(tokens.size(1), device=hyps.device).unsqueeze(0)
                source = token_lens.unsqueeze(1) - 1 - positions
                gathered = tokens.gather(1, source.clamp(min=0))
                reversed_tokens = torch.where(source >= 0, gathered, torch.full_like(tokens, self.eos))
                sos = torch.full((n, 1), self.sos, dtype=hyps.dtype, device=hyps.device)
                r_hyps = torch.cat([sos, reversed_tokens], dim=1)
            logits, r_logits = decoder(encoder_out, memory_mask, hyps, hyps_lens, r_hyps, index)
            logp = torch.log_softmax(logits.float(), dim=-1)
            if r_logits is None:
                return logp, torch.zeros_like(logp)
            return logp, torch.log_softmax(r_logits.float(), dim=-1)

    # ------------------------------------------------------------------ searches
    def _greedy(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> List[List[int]]:
        best = log_probs.argmax(dim=-1)
        previous = torch.nn.functional.pad(best[:, :-1], [1, 0], value=-1.0)
        keep = (best != previous) & (best != self.blank) & _valid_mask(lengths, best.size(1))
        out: List[List[int]] = []
        for b in range(best.size(0)):
            row: List[int] = best[b][keep[b]].tolist()
            out.append(row)
        return out

    @torch.jit.export
    def ctc_prefix_beam_search_nbest(self, log_probs: torch.Tensor, lengths: torch.Tensor,
                                     beam_size: int = 10,
                                     blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD
                                     ) -> Tuple[List[List[List[int]]], List[List[float]]]:
        """N-best prefixes (at most ``beam_size``, best first) of every utterance from CTC
        log-posteriors ``[B, T', V]``, with their CTC log-probabilities."""
        if beam_size < 1:
            raise ValueError("beam_size must be >= 1")
        k = min(beam_size, log_probs.size(-1))
        log_probs = log_probs.float()
        top = log_probs.topk(k, dim=-1)
        top_lp = top[0]
        top_ids = top[1]
        blank_lp = log_probs[:, :, self.blank]
        skip_lp = math.log(blank_skip_threshold) if blank_skip_threshold > 0 else -math.inf
        hyps: List[List[List[int]]] = []
        scores: List[List[float]] = []
        lens: List[int] = lengths.tolist()
        for b in range(len(lens)):
            n = lens[b]
            frame_lp: List[List[float]] = top_lp[b, :n].tolist()
            frame_ids: List[List[int]] = top_ids[b, :n].tolist()
            frame_blank: List[float] = blank_lp[b, :n].tolist()
            h, s = prefix_beam_search_one(frame_lp, frame_ids, frame_blank, skip_lp, beam_size,
                                          self.blank, self.vocab)
            hyps.append(h)
            scores.append(s)
        return hyps, scores

    def _rescore(self, encoder_out: torch.Tensor, encoder_lengths: torch.Tensor,
                 nbest: List[List[List[int]]], ctc_scores: List[List[float]],
                 ctc_weight: float, reverse_weight: float) -> List[List[int]]:
        """Best n-best entry of each utterance by decoder score + ``ctc_weight`` · CTC."""
        decoder = self.decoder
        if decoder is None:
            raise RuntimeError("attention_rescoring needs an attention decoder; this model was "
                               "trained with ctc_weight 1")
        else:
            if reverse_weight > 0.0 and not self.bidirectional:
                raise RuntimeError("reverse_weight > 0 needs a model with decoder bitransformer")
            owner: List[int] = []
            flat: List[List[int]] = []
            for b in range(len(nbest)):
                for h in nbest[b]:
                    owner.append(b)
                    flat.append(h)
            results: List[List[int]] = []
            if len(flat) == 0:
                for b in range(len(nbest)):
                    results.append(_no_tokens())
                return results
            device = encoder_out.device
            index = torch.tensor(owner, dtype=torch.long, device=device)
            memory_mask = _valid_mask(encoder_lengths[index], encoder_out.size(1)).unsqueeze(1)
            ys_in, ys_out, lengths = _decoder_io(flat, self.sos, device)
            r_ys_in: Optional[torch.Tensor] = None
            r_ys_out: Optional[torch.Tensor] = None
            if reverse_weight > 0.0:
                reversed_flat: List[List[int]] = []
                for h in flat:
                    r = h.copy()
                    r.reverse()
                    reversed_flat.append(r)
                r_io = _decoder_io(reversed_flat, self.sos, device)
                r_ys_in = r_io[0]
                r_ys_out = r_io[1]
            logits, r_logits = decoder(encoder_out, memory_mask, ys_in, lengths, r_ys_in, index)
            score = _teacher_forced_scores(logits, ys_out)
            if reverse_weight > 0.0:
                if r_logits is None or r_ys_out is None:
                    raise RuntimeError("reverse_weight > 0 needs a bidirectional decoder")
                r_score = _teacher_forced_scores(r_logits, r_ys_out)
                score = (1.0 - reverse_weight) * score + reverse_weight * r_score
            flat_scores: List[float] = score.tolist()
            position = 0
            for b in range(len(nbest)):
                best_index = -1
                best_total = 0.0
                for i in range(len(nbest[b])):
                    total = flat_scores[position] + ctc_weight * ctc_scores[b][i]
                    position += 1
                    if best_index < 0 or total > best_total:
                        best_index = i
                        best_total = total
                if best_index < 0:
                    results.append(_no_tokens())
                else:
                    results.append(nbest[b][best_index])
            return results

    @torch.jit.export
    def ctc_greedy_search(self, feats: torch.Tensor, feats_lengths: torch.Tensor) -> List[List[int]]:
        """Token ids per utterance, best path."""
        encoder_out, encoder_lengths = self.forward(feats, feats_lengths)
        return self._greedy(self.ctc(encoder_out), encoder_lengths)

    @torch.jit.export
    def ctc_prefix_beam_search(self, feats: torch.Tensor, feats_lengths: torch.Tensor, beam_size: int = 10,
                               blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD
                               ) -> List[List[int]]:
        """Token ids per utterance, best prefix of the CTC prefix beam search."""
        encoder_out, encoder_lengths = self.forward(feats, feats_lengths)
        nbest, _ = self.ctc_prefix_beam_search_nbest(self.ctc(encoder_out), encoder_lengths, beam_size,
                                                     blank_skip_threshold)
        return _best_of(nbest)

    @torch.jit.export
    def attention_rescoring(self, feats: torch.Tensor, feats_lengths: torch.Tensor, beam_size: int = 10,
                            ctc_weight: float = 0.3, reverse_weight: float = 0.0,
                            blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD) -> List[List[int]]:
        """Token ids per utterance: the prefix-beam n-best rescored by the decoder(s)."""
        encoder_out, encoder_lengths = self.forward(feats, feats_lengths)
        nbest, scores = self.ctc_prefix_beam_search_nbest(self.ctc(encoder_out), encoder_lengths, beam_size,
                                                          blank_skip_threshold)
        return self._rescore(encoder_out, encoder_lengths, nbest, scores, ctc_weight, reverse_weight)

    @torch.jit.export
    def decode(self, feats: torch.Tensor, feats_lengths: torch.Tensor, beam_size: int = 10,
               ctc_weight: float = 0.3, reverse_weight: float = 0.0,
               blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD) -> Dict[str, List[List[int]]]:
        """``ctc_greedy_search``, ``ctc_prefix_beam_search`` and (with a decoder)
        ``attention_rescoring`` from one encoder pass."""
        encoder_out, encoder_lengths = self.forward(feats, feats_lengths)
        log_probs = self.ctc(encoder_out)
        results: Dict[str, List[List[int]]] = {}
        results["ctc_greedy_search"] = self._greedy(log_probs, encoder_lengths)
        nbest, scores = self.ctc_prefix_beam_search_nbest(log_probs, encoder_lengths, beam_size,
                                                          blank_skip_threshold)
        results["ctc_prefix_beam_search"] = _best_of(nbest)
        if self.decoder is not None:
            results["attention_rescoring"] = self._rescore(encoder_out, encoder_lengths, nbest, scores,
                                                           ctc_weight, reverse_weight)
        return results


# ----------------------------------------------------------------------------- export


def _is_dropout(module: nn.Module) -> bool:
    """A dropout layer: named ``*Dropout``, holding no parameters, buffers or submodules."""
    return (type(module).__name__.endswith("Dropout") and not list(module.parameters())
            and not list(module.buffers()) and not list(module.children()))


def inference_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` in eval mode with every dropout layer replaced by
    ``nn.Identity`` -- what dropout is at inference -- so a dropout whose training path
    TorchScript cannot compile never blocks the export (``check_against_eager`` then
    compares the copy with the original)."""
    copy_ = copy.deepcopy(model).eval()
    for module in list(copy_.modules()):
        for name, child in list(module.named_children()):
            if _is_dropout(child):
                setattr(module, name, nn.Identity())
    return copy_


def script_model(model: nn.Module, units: List[str], **meta) -> torch.jit.ScriptModule:
    """``torch.jit.script`` of :class:`ScriptableAsr` around an inference copy of
    ``model`` (see :func:`inference_copy`; ``model`` itself is left as it is).
    ``meta``: the keyword arguments of :class:`ScriptableAsr`."""
    wrapper = ScriptableAsr(inference_copy(model), units, **meta).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script deprecation notice
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(wrapper)


def load_exported(source) -> tuple[torch.jit.ScriptModule, dict[str, str]]:
    """``(module, extra files)`` of an exported archive (a path or a binary file object),
    loaded on the CPU; the module is in eval mode."""
    extra = {EXTRA_CONFIG: "", EXTRA_UNITS: "", EXTRA_META: ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(source if hasattr(source, "read") else str(source), map_location="cpu",
                                _extra_files=extra)
    return module.eval(), {k: (v.decode("utf-8") if isinstance(v, bytes) else v) for k, v in extra.items()}


def write_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, fsync, rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    return path


def check_against_eager(model: nn.Module, scripted, feats: torch.Tensor, feats_lengths: torch.Tensor,
                        beam_size: int = 10, ctc_weight: float = 0.3, reverse_weight: float = 0.0,
                        blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD,
                        feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                        atol: float = 1e-5) -> dict:
    """Compare ``scripted`` with eager :func:`asrkit.decode.decode` on one batch: encoder
    outputs within ``atol`` and identical hypotheses in every mode the export offers.
    Raises :class:`ExportCheckError` naming the first difference; returns ``{"max_abs_diff": ...}``.
    ``feature_cmvn``: the data-pipeline CMVN eager decoding applies to ``feats`` first."""
    from asrkit.decode.search import decode

    modes = ["ctc_greedy_search", "ctc_prefix_beam_search"]
    if model.decoder is not None:
        modes.append("attention_rescoring")
    eager_feats = feats if feature_cmvn is None else (feats - feature_cmvn[0]) * feature_cmvn[1]
    with torch.inference_mode():
        enc, enc_lengths = model.encode(eager_feats, feats_lengths)
        expected = decode(model, eager_feats, feats_lengths, modes, beam_size=beam_size,
                          ctc_weight=ctc_weight, reverse_weight=reverse_weight,
                          blank_skip_threshold=blank_skip_threshold)
        s_enc, s_lengths = scripted(feats, feats_lengths)
        got = scripted.decode(feats, feats_lengths, beam_size, ctc_weight, reverse_weight, blank_skip_threshold)
    if not torch.equal(s_lengths, enc_lengths):
        raise ExportCheckError(f"encoder lengths differ: {s_lengths.tolist()} vs eager {enc_lengths.tolist()}")
    valid = _valid_mask(enc_lengths, enc.size(1)).unsqueeze(-1)
    diff = float(((s_enc - enc).abs() * valid).max()) if enc.numel() else 0.0
    if diff > atol:
        raise ExportCheckError(f"encoder outputs differ by {diff:.3g} > {atol:g}")
    for mode in modes:
        if got[mode] != expected[mode]:
            raise ExportCheckError(f"{mode}: exported {got[mode]} != eager {expected[mode]}")
    return {"max_abs_diff": diff, "modes": modes}


def export_model(model: nn.Module, units: List[str], output: str | Path, *, sample_rate: int,
                 num_mel_bins: int, frame_length: float, frame_shift: float,
                 feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                 unit_separator: str = "", config_text: str = "", verify: bool = True,
                 seed: int = 0) -> dict:
    """Script ``model`` with its metadata and write it to ``output`` with ``train.yaml``
    (``config_text``), ``units.txt`` and ``meta.json`` as extra files.

    The archive is serialised in memory, loaded back from those bytes and (``verify``)
    checked against eager decoding on a random batch of two utterances of different
    lengths (:func:`check_against_eager`) before it is written atomically, so a failed
    check never leaves a file at ``output``.  Returns a summary dict (timings in
    seconds, size in bytes, check results)."""
    t0 = time.perf_counter()
    scripted = script_model(model, units, sample_rate=sample_rate, num_mel_bins=num_mel_bins,
                            frame_length=frame_length, frame_shift=frame_shift,
                            feature_cmvn=feature_cmvn, unit_separator=unit_separator)
    summary: dict = {"script_s": time.perf_counter() - t0}
    info = {"format": EXPORT_FORMAT, "sample_rate": sample_rate, "num_mel_bins": num_mel_bins,
            "frame_length": frame_length, "frame_shift": frame_shift, "dither": 0.0, "energy_floor": 0.0,
            "vocab_size": len(units), "sos": scripted.sos_symbol(), "eos": scripted.eos_symbol(),
            "blank": scripted.blank_id(), "subsampling_rate": scripted.subsampling_rate(),
            "right_context": scripted.right_context(), "min_input_length": scripted.min_input_length(),
            "is_bidirectional_decoder": scripted.is_bidirectional_decoder(),
            "has_decoder": scripted.has_decoder(), "unit_separator": unit_separator,
            "feature_cmvn_included": feature_cmvn is not None}
    extra = {EXTRA_CONFIG: config_text, EXTRA_UNITS: "".join(f"{u} {i}\n" for i, u in enumerate(units)),
             EXTRA_META: json.dumps(info, indent=1, sort_keys=True, ensure_ascii=False)}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(scripted, buffer, _extra_files=extra)
    data = buffer.getvalue()
    summary["bytes"] = len(data)
    if verify:
        t1 = time.perf_counter()
        loaded, _ = load_exported(io.BytesIO(data))
        g = torch.Generator().manual_seed(seed)
        min_frames = scripted.min_input_length()
        lengths = torch.tensor([min_frames + 120, min_frames + 57])
        feats = torch.randn(2, int(lengths.max()), num_mel_bins, generator=g) * 3.0 + 8.0
        feats[1, int(lengths[1]):] = 0.0
        summary.update(check_against_eager(model, loaded, feats, lengths, beam_size=4,
                                           feature_cmvn=feature_cmvn))
        summary["verify_s"] = time.perf_counter() - t1
    write_atomic(output, data)
    summary["total_s"] = time.perf_counter() - t0
    return summary
