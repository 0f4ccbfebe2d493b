"""Decoding a padded batch: the encoder runs once (full context, masked chunks, or chunk
by chunk with caches) and its output feeds every requested mode (the registry,
:mod:`asrkit.decode.modes`, says how each runs on the outputs they share,
:class:`asrkit.decode.shared.SharedOutputs`)."""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from asrkit.decode.fusion import Fusion
from asrkit.decode.modes import REGISTRY, check_modes, check_reverse_weight
from asrkit.decode.options import DecodingOptionError, DecodingOptions
from asrkit.decode.searcher import Searcher
from asrkit.decode.shared import SharedOutputs


def encoder_output(model, feats: torch.Tensor, feats_lengths: torch.Tensor, options: DecodingOptions
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(encoder_out [B, T', D], encoder_lengths [B])`` of ``feats [B, T, F]`` (padded)
    as decoding with ``options`` sees it (``decoding_chunk_size``,
    ``num_decoding_left_chunks`` and ``simulate_streaming``; the others do not matter here):

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
    chunk, left_chunks = options.decoding_chunk_size, options.num_decoding_left_chunks
    if not options.chunked:
        return model.encode(feats, feats_lengths)
    if not options.simulate_streaming:
        return model.encode(feats, feats_lengths, chunk_size=chunk, num_left_chunks=left_chunks)
    outputs, lengths = [], []
    for b, n in enumerate(feats_lengths.tolist()):
        xs = feats[b:b + 1, :n]
        if model.cmvn is not None:
            xs = model.cmvn(xs)
        out, out_lengths = model.encoder.forward_chunk_by_chunk(xs, chunk, left_chunks)
        outputs.append(out[0, : int(out_lengths[0])])
        lengths.append(int(out_lengths[0]))
    padded = torch.nn.utils.rnn.pad_sequence(outputs, batch_first=True)
    return padded, torch.tensor(lengths, dtype=torch.long, device=feats.device)


@torch.inference_mode()
def decode(model, feats: torch.Tensor, feats_lengths: torch.Tensor, options: DecodingOptions,
           fusion: Optional[Fusion] = None) -> dict[str, list[list[int]]]:
    """Token ids per utterance for each of ``options.modes``, in that order, decoded as
    :class:`asrkit.decode.options.DecodingOptions` says.

    The encoder output comes from :func:`encoder_output`; every mode then runs on it as on
    a full-context output.  ``ctc_prefix_beam_search`` and ``attention_rescoring`` share
    one prefix beam search.  ``blank_penalty`` applies to every CTC search, including the
    n-best and CTC scores of ``attention_rescoring``; ``length_penalty`` only ranks
    ``attention`` hypotheses.  A mode the model cannot run raises
    :class:`asrkit.decode.modes.ModeError`, ``reverse_weight > 0`` with a mode that reads it
    (:func:`asrkit.decode.modes.check_reverse_weight`) on a model without a right-to-left
    decoder ``ValueError``, both before the encoder runs.
    The model passes run under ``options.autocast`` (``options.dtype``).  The model should be
    in eval mode (``model.eval()``).

    ``fusion``: :func:`asrkit.decode.options.build_fusion` of ``options`` and the model's
    tokenizer when they ask for an LM or context phrases (:class:`DecodingOptionError`
    without it); the modes that take them (:func:`asrkit.decode.modes.fused_modes`) search
    with it, the others as without.  With ``None`` (options asking for neither) every mode
    searches exactly as without :mod:`asrkit.decode.fusion`."""
    if options.fused != (fusion is not None):
        raise DecodingOptionError("an LM or context phrases in the options need fusion=build_fusion(options, "
                                  "tokenizer), and fusion needs them in the options")
    searcher = Searcher.of_model(model)
    modes = check_modes(searcher, options.modes)
    check_reverse_weight(searcher, modes, options.reverse_weight)
    with options.autocast(feats.device.type):  # (fp32: no autocast)
        enc_out, enc_lengths = encoder_output(model, feats, feats_lengths, options)
        shared = SharedOutputs.from_options(searcher, enc_out, enc_lengths, options, model)
        if fusion is None:
            return {mode: REGISTRY[mode].run(shared) for mode in modes}
        fused = dataclasses.replace(shared, fusion=fusion)  # (the encoder output and log-probs shared)
        return {mode: REGISTRY[mode].run(fused if REGISTRY[mode].fused else shared) for mode in modes}
