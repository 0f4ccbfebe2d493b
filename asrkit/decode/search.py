"""One entry point for every decoding mode: the encoder runs once per batch and its
output feeds all requested modes."""
from __future__ import annotations

from typing import Iterable

import torch

from asrkit.decode.attention_search import attention_beam_search, attention_rescoring
from asrkit.decode.ctc_search import (DEFAULT_BLANK_SKIP_THRESHOLD, ctc_greedy_search,
                                      ctc_prefix_beam_search)

MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring")
_NEEDS_CTC = {"ctc_greedy_search", "ctc_prefix_beam_search", "attention_rescoring"}
_NEEDS_DECODER = {"attention", "attention_rescoring"}


def check_modes(model, modes: Iterable[str]) -> list[str]:
    """Validate mode names against :data:`MODES` and the model's branches; return them as a list."""
    modes = list(modes)
    if not modes:
        raise ValueError(f"no decoding mode given; choose from {list(MODES)}")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown decoding mode {mode!r}; choose from {list(MODES)}")
        if mode in _NEEDS_CTC and model.ctc is None:
            raise ValueError(f"mode {mode} needs a CTC head; this model was trained with ctc_weight 0")
        if mode in _NEEDS_DECODER and model.decoder is None:
            raise ValueError(f"mode {mode} needs a decoder; this model was trained with ctc_weight 1")
    return modes


@torch.inference_mode()
def decode(model, feats: torch.Tensor, feats_lengths: torch.Tensor, modes: Iterable[str],
           beam_size: int = 10, ctc_weight: float = 0.3, reverse_weight: float = 0.0,
           blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD) -> dict[str, list[list[int]]]:
    """Token ids per utterance for each of ``modes`` (a subset of :data:`MODES`).

    ``beam_size`` applies to ``ctc_prefix_beam_search``, ``attention`` and the n-best
    of ``attention_rescoring``, which ranks hypotheses by
    ``(1 − reverse_weight)·l2r + reverse_weight·r2l + ctc_weight·CTC``.
    ``ctc_prefix_beam_search`` and ``attention_rescoring`` share one prefix beam search.
    The model should be in eval mode (``model.eval()``)."""
    modes = check_modes(model, modes)
    if reverse_weight > 0.0 and "attention_rescoring" in modes and not model.decoder.has_reverse:
        raise ValueError("reverse_weight > 0 needs a model with decoder bitransformer")
    enc_out, enc_lengths = model.encode(feats, feats_lengths)
    results: dict[str, list[list[int]]] = {}
    log_probs = model.ctc_log_probs(enc_out) if _NEEDS_CTC.intersection(modes) else None
    if "ctc_greedy_search" in modes:
        results["ctc_greedy_search"] = ctc_greedy_search(log_probs, enc_lengths, model.blank_id)
    if {"ctc_prefix_beam_search", "attention_rescoring"}.intersection(modes):
        nbest = ctc_prefix_beam_search(log_probs, enc_lengths, beam_size, model.blank_id,
                                       blank_skip_threshold)
        if "ctc_prefix_beam_search" in modes:
            results["ctc_prefix_beam_search"] = [list(hyps[0].tokens) for hyps in nbest]
        if "attention_rescoring" in modes:
            best = attention_rescoring(model.decoder, enc_out, enc_lengths, nbest, model.eos,
                                       ctc_weight, reverse_weight)
            results["attention_rescoring"] = [list(h.tokens) for h in best]
    if "attention" in modes:
        best = attention_beam_search(model.decoder, enc_out, enc_lengths, beam_size, model.sos, model.eos)
        results["attention"] = [list(h.tokens) for h in best]
    return {mode: results[mode] for mode in modes}
