"""One entry point for every decoding mode: the encoder runs once per batch and its
output feeds all requested modes (see :mod:`asrkit.decode.modes` for the registry)."""
from __future__ import annotations

from typing import Iterable

import torch

from asrkit.decode.ctc_search import DEFAULT_BLANK_SKIP_THRESHOLD
from asrkit.decode.modes import REGISTRY, SharedOutputs, check_modes, mode_names
from asrkit.decode.searcher import Searcher

MODES = mode_names()


@torch.inference_mode()
def decode(model, feats: torch.Tensor, feats_lengths: torch.Tensor, modes: Iterable[str],
           beam_size: int = 10, ctc_weight: float = 0.3, reverse_weight: float = 0.0,
           blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD) -> dict[str, list[list[int]]]:
    """Token ids per utterance for each of ``modes`` (registered names, see
    :data:`asrkit.decode.modes.REGISTRY`), in the order given.

    ``beam_size`` applies to ``ctc_prefix_beam_search``, ``attention`` and the n-best
    of ``attention_rescoring``, which ranks hypotheses by
    ``(1 − reverse_weight)·l2r + reverse_weight·r2l + ctc_weight·CTC``.
    ``ctc_prefix_beam_search`` and ``attention_rescoring`` share one prefix beam search.
    A mode the model cannot run raises :class:`asrkit.decode.modes.ModeError`.
    The model should be in eval mode (``model.eval()``)."""
    searcher = Searcher.of_model(model)
    modes = check_modes(searcher, modes)
    if reverse_weight > 0.0 and "attention_rescoring" in modes and not searcher.bidirectional:
        raise ValueError("reverse_weight > 0 needs a model with decoder bitransformer")
    enc_out, enc_lengths = model.encode(feats, feats_lengths)
    shared = SharedOutputs(searcher, enc_out, enc_lengths, beam_size, ctc_weight, reverse_weight,
                           blank_skip_threshold)
    return {mode: REGISTRY[mode].run(shared) for mode in modes}
