"""Where sherpa-onnx's transducer transcripts can differ from asrkit's: sherpa-onnx's greedy
search emits at most one symbol per encoder frame, asrkit's ``rnnt_greedy_search`` up to
:data:`~asrkit.decode.transducer_search.MAX_SYMBOLS_PER_FRAME` (WeNet's) -- except for a model
trained in the modified lattice (``model_conf.rnnt_type: modified``), which it searches one
symbol per frame too.  The two differ on the frames where asrkit's emits several.

The export (:func:`asrkit.export.onnx_transducer.export_transducer_onnx`) counts those frames
on speech it is given (:func:`symbols_per_frame`) and its summary carries the one line that
says what follows (:func:`search_mismatch`), which ``asrkit.bin.export_onnx`` logs as a
warning.  The random features of the export's numerical checks cannot stand in for speech:
what a model emits on noise depends on the noise, not on how it decodes speech.
"""
from __future__ import annotations

import collections
from typing import Dict, Optional, Sequence

import torch
from torch import nn

from asrkit.decode.transducer_search import MAX_SYMBOLS_PER_FRAME, TransducerGreedySearch, TransducerSearcher


def symbols_per_frame(model: nn.Module, normalizer: nn.Module, feats: Sequence[torch.Tensor]) -> Dict[str, int]:
    """What asrkit's default greedy search (``rnnt_greedy_search``: up to
    ``MAX_SYMBOLS_PER_FRAME`` symbols a frame, one for ``rnnt_type: modified``) emits on each
    of ``feats`` (training fbank ``[T, F]``, through ``normalizer`` and the full-context
    encoder): ``utterances``, encoder ``frames``, ``multi_symbol_frames`` (frames on which it
    emits more than one symbol) and ``tokens``."""
    searcher = TransducerSearcher.of_model(model)
    counts = {"utterances": len(feats), "frames": 0, "multi_symbol_frames": 0, "tokens": 0}
    for x in feats:
        search = TransducerGreedySearch(searcher, torch.device("cpu"), MAX_SYMBOLS_PER_FRAME)
        with torch.no_grad():
            out, _ = model.encoder(normalizer(x.unsqueeze(0)), torch.tensor([x.size(0)]))
            search.feed(out[0])
        per_frame = collections.Counter(search.best().frames)
        counts["frames"] += out.size(1)
        counts["multi_symbol_frames"] += sum(1 for n in per_frame.values() if n > 1)
        counts["tokens"] += len(search.best().tokens)
    return counts


def search_mismatch(model: nn.Module, counts: Optional[Dict[str, int]]) -> Optional[str]:
    """``None`` when sherpa-onnx's greedy search (one symbol per frame) gives asrkit's
    ``rnnt_greedy_search`` transcripts -- a model trained in the modified lattice, or
    ``counts`` (:func:`symbols_per_frame`) without a frame of several symbols --, else one
    line: how many frames emit more than one symbol (or, with ``counts`` ``None``, that a
    regular-lattice model can) and the fix."""
    if getattr(model, "rnnt_type", "regular") == "modified":
        return None
    fix = ("Train with model_conf.rnnt_type: modified (one symbol per frame; docs/export.md) for the same "
           "transcripts in both")
    if counts is None:
        return ("the model was trained in the regular lattice (model_conf.rnnt_type: regular), where asrkit's "
                "greedy search (rnnt_greedy_search) can emit several symbols on one encoder frame; sherpa-onnx's "
                "transducer search emits at most one per frame, so its transcripts can differ (not measured: give "
                f"the export speech to count such frames, asrkit.bin.export_onnx --check_data LIST). {fix}")
    multi, frames = counts["multi_symbol_frames"], counts["frames"]
    if not multi:
        return None
    utterances = f"{counts['utterances']} check utterance{'s' if counts['utterances'] != 1 else ''}"
    return (f"{multi} of {frames} encoder frames ({100.0 * multi / frames:.1f} %) of {utterances} emit more than "
            f"one symbol under asrkit's greedy search (rnnt_greedy_search); sherpa-onnx's transducer search emits "
            f"at most one per frame, so its transcripts can differ from asrkit's. {fix}")
