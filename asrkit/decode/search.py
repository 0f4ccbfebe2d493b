"""One entry point for every decoding mode: the encoder runs once per batch (full context,
masked chunks, or chunk by chunk with caches) and its output feeds all requested modes
(see :mod:`asrkit.decode.modes` for the registry)."""
from __future__ import annotations

from typing import Iterable

import torch

from asrkit.decode.ctc_search import DEFAULT_BLANK_SKIP_THRESHOLD
from asrkit.decode.modes import REGISTRY, SharedOutputs, check_modes, mode_names
from asrkit.decode.searcher import Searcher

MODES = mode_names()


class DecodingOptionError(ValueError):
    """A decoding option outside its range, or options that do not go together."""


def check_decoding_options(decoding_chunk_size: int = 0, num_decoding_left_chunks: int = -1,
                           simulate_streaming: bool = False, length_penalty: float = 0.0,
                           blank_penalty: float = 0.0) -> None:
    """Raise :class:`DecodingOptionError` (one line naming the option) unless
    ``decoding_chunk_size >= -1``, ``num_decoding_left_chunks >= -1``,
    ``simulate_streaming`` only with ``decoding_chunk_size > 0``, and both penalties >= 0."""
    if decoding_chunk_size < -1:
        raise DecodingOptionError(f"decoding_chunk_size must be -1 or 0 (full context) or > 0 (chunk size in "
                                  f"encoder frames), got {decoding_chunk_size}")
    if num_decoding_left_chunks < -1:
        raise DecodingOptionError(f"num_decoding_left_chunks must be -1 (all left chunks) or >= 0, "
                                  f"got {num_decoding_left_chunks}")
    if simulate_streaming and decoding_chunk_size <= 0:
        raise DecodingOptionError(f"simulate_streaming needs decoding_chunk_size > 0, got {decoding_chunk_size}")
    if length_penalty < 0.0:
        raise DecodingOptionError(f"length_penalty must be >= 0, got {length_penalty}")
    if blank_penalty < 0.0:
        raise DecodingOptionError(f"blank_penalty must be >= 0, got {blank_penalty}")


def encoder_output(model, feats: torch.Tensor, feats_lengths: torch.Tensor, decoding_chunk_size: int = 0,
                   num_decoding_left_chunks: int = -1, simulate_streaming: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(encoder_out [B, T', D], encoder_lengths [B])`` of ``feats [B, T, F]`` (padded)
    as decoding sees it:

    * ``decoding_chunk_size`` -1 or 0: full context, ``model.encode(feats, lengths)``;
      ``num_decoding_left_chunks`` has no effect.
    * ``decoding_chunk_size = N > 0``: the masked full forward,
      ``model.encode(feats, lengths, chunk_size=N, num_left_chunks=M)``: each encoder frame
      attends to its chunk of ``N`` frames and ``M`` chunks before it (all for ``M = -1``).
    * with ``simulate_streaming`` (``N > 0``): each utterance alone, trimmed to its length,
      CMVN applied, through ``model.encoder.forward_chunk_by_chunk(xs [1, T_b, F], N, M)``
      (the encoder fed chunk by chunk, carrying its attention and convolution caches); the
      outputs zero-padded to the longest, lengths as the encoder returned them.  It equals
      the masked forward (to rounding) -- it is the streaming path, run offline.
    """
    check_decoding_options(decoding_chunk_size, num_decoding_left_chunks, simulate_streaming)
    if decoding_chunk_size <= 0:
        return model.encode(feats, feats_lengths)
    if not simulate_streaming:
        return model.encode(feats, feats_lengths, chunk_size=decoding_chunk_size,
                            num_left_chunks=num_decoding_left_chunks)
    outputs, lengths = [], []
    for b, n in enumerate(feats_lengths.tolist()):
        xs = feats[b:b + 1, :n]
        if model.cmvn is not None:
            xs = model.cmvn(xs)
        out, out_lengths = model.encoder.forward_chunk_by_chunk(xs, decoding_chunk_size, num_decoding_left_chunks)
        outputs.append(out[0, : int(out_lengths[0])])
        lengths.append(int(out_lengths[0]))
    padded = torch.nn.utils.rnn.pad_sequence(outputs, batch_first=True)
    return padded, torch.tensor(lengths, dtype=torch.long, device=feats.device)


@torch.inference_mode()
def decode(model, feats: torch.Tensor, feats_lengths: torch.Tensor, modes: Iterable[str],
           beam_size: int = 10, ctc_weight: float = 0.3, reverse_weight: float = 0.0,
           blank_skip_threshold: float = DEFAULT_BLANK_SKIP_THRESHOLD, length_penalty: float = 0.0,
           blank_penalty: float = 0.0, decoding_chunk_size: int = 0, num_decoding_left_chunks: int = -1,
           simulate_streaming: bool = False) -> dict[str, list[list[int]]]:
    """Token ids per utterance for each of ``modes`` (registered names, see
    :data:`asrkit.decode.modes.REGISTRY`), in the order given.

    ``beam_size`` applies to ``ctc_prefix_beam_search``, ``attention`` and the n-best
    of ``attention_rescoring``, which ranks hypotheses by
    ``(1 − reverse_weight)·l2r + reverse_weight·r2l + ctc_weight·CTC``.
    ``ctc_prefix_beam_search`` and ``attention_rescoring`` share one prefix beam search.
    ``length_penalty`` (WeNet's, 0: none) ranks ``attention`` hypotheses by
    ``score / tokens ** length_penalty``; ``blank_penalty`` (WeNet's, 0: none) lowers the
    blank's logit before every CTC search, including the n-best and CTC scores of
    ``attention_rescoring``.  The encoder output comes from :func:`encoder_output`
    (``decoding_chunk_size``, ``num_decoding_left_chunks``, ``simulate_streaming``); every
    mode then runs on it as on a full-context output.
    A mode the model cannot run raises :class:`asrkit.decode.modes.ModeError`, a bad
    option :class:`DecodingOptionError`.  The model should be in eval mode (``model.eval()``)."""
    check_decoding_options(decoding_chunk_size, num_decoding_left_chunks, simulate_streaming, length_penalty,
                           blank_penalty)
    searcher = Searcher.of_model(model)
    modes = check_modes(searcher, modes)
    if reverse_weight > 0.0 and "attention_rescoring" in modes and not searcher.bidirectional:
        raise ValueError("reverse_weight > 0 needs a model with decoder bitransformer")
    enc_out, enc_lengths = encoder_output(model, feats, feats_lengths, decoding_chunk_size,
                                          num_decoding_left_chunks, simulate_streaming)
    shared = SharedOutputs(searcher, enc_out, enc_lengths, beam_size, ctc_weight, reverse_weight,
                           blank_skip_threshold, length_penalty, blank_penalty)
    return {mode: REGISTRY[mode].run(shared) for mode in modes}
