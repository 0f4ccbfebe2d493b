"""sherpa-onnx's transducer recognizers for the files of :mod:`asrkit.export.onnx_transducer`,
and what asrkit itself gives for the same audio, for comparing the two.

* :func:`offline_recognizer`: ``sherpa_onnx.OfflineRecognizer.from_transducer`` (greedy
  search).  It computes kaldi-native-fbank's defaults (samples in [-1, 1], ``snip_edges``
  false, ``high_freq`` −400); the encoder adapts the sample scale inside.
* :func:`online_recognizer`: ``sherpa_onnx.OnlineRecognizer.from_transducer`` with the
  training filterbank (its public arguments ``low_freq``, ``high_freq``, ``snip_edges``,
  ``normalize_samples``), read from the streaming encoder's metadata.

sherpa-onnx's transducer greedy search emits **at most one symbol per frame**, takes id 0
as the blank and treats ``<unk>`` as a blank (its predictor does not advance on it).  The
asrkit side of a comparison (:func:`asrkit_offline_tokens`, :func:`asrkit_streaming_tokens`)
decodes the features the runtime computes (:func:`runtime_features`) with asrkit's own
encoder and :class:`~asrkit.decode.transducer_search.TransducerGreedySearch` limited to
one symbol per frame; streaming, over the windows sherpa-onnx reads, chunk by chunk
(``forward_chunk_by_chunk`` with ``num_left_chunks`` chunks of cache).

:func:`compare` (``python -m asrkit.bin.compare_sherpa_transducer``) counts the utterances of
a data list whose transcripts agree and the CER of each side.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import soundfile as sf
import torch
from torch import nn

from asrkit.decode.transducer_search import TransducerGreedySearch, TransducerSearcher
from asrkit.export.onnx import int8_name
from asrkit.export.onnx_transducer import (DECODER_FILE, ENCODER_FILE, JOINER_FILE, STREAMING_ENCODER_FILE,
                                           TOKENS_FILE, Fbank, eager_streaming_encoder)
from asrkit.export.onnx_transducer_graphs import FbankAdapter
from asrkit.export.sherpa import read_metadata
from asrkit.metrics import score
from asrkit.models.cmvn import RawFbankNormalization


def _files(onnx_dir: Path | str, encoder: str, int8: bool) -> Dict[str, str]:
    names = {"encoder": encoder, "decoder": DECODER_FILE, "joiner": JOINER_FILE}
    folder = Path(onnx_dir)
    return {k: str(int8_name(folder / v) if int8 else folder / v) for k, v in names.items()}


def offline_recognizer(onnx_dir: Path | str, int8: bool = False, num_threads: int = 1):
    """``sherpa_onnx.OfflineRecognizer.from_transducer`` for ``onnx_dir`` (greedy search)."""
    import sherpa_onnx  # (deferred: optional dependency sherpa_onnx)
    files = _files(onnx_dir, ENCODER_FILE, int8)
    meta = read_metadata(files["encoder"])
    return sherpa_onnx.OfflineRecognizer.from_transducer(
        tokens=str(Path(onnx_dir) / TOKENS_FILE), num_threads=num_threads, dither=0.0,
        sample_rate=int(meta["asrkit_input_sample_rate"]), feature_dim=int(meta["asrkit_input_num_mel_bins"]),
        decoding_method="greedy_search", **files)


def online_recognizer(onnx_dir: Path | str, int8: bool = False, num_threads: int = 1):
    """``sherpa_onnx.OnlineRecognizer.from_transducer`` for ``onnx_dir``'s streaming encoder,
    computing the filterbank its metadata names (the training one)."""
    import sherpa_onnx  # (deferred: optional dependency sherpa_onnx)
    files = _files(onnx_dir, STREAMING_ENCODER_FILE, int8)
    fbank = Fbank.from_metadata(read_metadata(files["encoder"]), "asrkit_input_")
    return sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(Path(onnx_dir) / TOKENS_FILE), num_threads=num_threads, sample_rate=fbank.sample_rate,
        feature_dim=fbank.num_mel_bins, low_freq=fbank.low_freq, high_freq=fbank.high_freq, dither=0.0,
        normalize_samples=fbank.sample_scale == 1.0, snip_edges=fbank.snip_edges,
        decoding_method="greedy_search", **files)


def tail_padding_s(meta: Dict[str, str]) -> float:
    """Silence after an utterance so that its last frames reach a window: one window and
    one hop of frames (10 ms)."""
    return (int(meta["T"]) + int(meta["decode_chunk_len"])) * 0.01


def decode_offline(recognizer, samples: np.ndarray, sample_rate: int) -> List[str]:
    """sherpa-onnx's token symbols for one utterance (float samples in [-1, 1))."""
    stream = recognizer.create_stream()
    stream.accept_waveform(sample_rate, np.ascontiguousarray(samples, dtype=np.float32))
    recognizer.decode_stream(stream)
    return list(stream.result.tokens)


def decode_streaming(recognizer, utterances: List[Tuple[np.ndarray, int]], tail_s: float,
                     piece_s: float = 0.1) -> List[List[str]]:
    """sherpa-onnx's token symbols for utterances streamed side by side (``piece_s`` pieces,
    then ``tail_s`` of silence and the end of input), decoded together with
    ``decode_streams`` whenever streams are ready (a batch of streams in one encoder run)."""
    streams = [recognizer.create_stream() for _ in utterances]
    pieces = [[samples[i:i + max(int(piece_s * rate), 1)] for i in range(0, len(samples), max(int(piece_s * rate), 1))]
              + [np.zeros(int(tail_s * rate), np.float32)] for samples, rate in utterances]
    for step in range(max(len(p) for p in pieces)):
        for stream, piece, (_, rate) in zip(streams, pieces, utterances):
            if step < len(piece):
                stream.accept_waveform(rate, np.ascontiguousarray(piece[step], dtype=np.float32))
                if step == len(piece) - 1:
                    stream.input_finished()
        while True:
            ready = [s for s in streams if recognizer.is_ready(s)]
            if not ready:
                break
            recognizer.decode_streams(ready)
    return [list(recognizer.tokens(s)) for s in streams]


# ------------------------------------------------------------------ asrkit's side


def sherpa_symbols(ids: List[int], units: List[str]) -> List[str]:
    """Token ids as sherpa-onnx reports them: its symbol table reads ``▁`` as a space."""
    return [units[i].replace("\u2581", " ") for i in ids]


def runtime_features(meta: Dict[str, str], samples: np.ndarray, sample_rate: int) -> torch.Tensor:
    """The fbank the runtime computes for an encoder with metadata ``meta``."""
    return Fbank.from_metadata(meta, "asrkit_input_").compute(samples, sample_rate)


def adapter(model: nn.Module, meta: Dict[str, str],
            feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> FbankAdapter:
    """What the encoder with metadata ``meta`` does to its input before the encoder: the
    scale shift and the CMVN (asrkit's modules)."""
    return FbankAdapter(RawFbankNormalization(model.cmvn, feature_cmvn), float(meta["asrkit_log_shift"])).eval()


def tokens_one_symbol_per_frame(model: nn.Module, encoder_out: torch.Tensor) -> List[int]:
    """asrkit's greedy search, one symbol per frame at most, over ``encoder_out [1, T, D]``."""
    search = TransducerGreedySearch(TransducerSearcher.of_model(model), torch.device("cpu"), max_symbols_per_frame=1)
    with torch.no_grad():
        search.feed(encoder_out[0])
    return list(search.best().tokens)


def asrkit_offline_tokens(model: nn.Module, norm: nn.Module, feats: torch.Tensor) -> List[int]:
    with torch.no_grad():
        out, _ = model.encoder(norm(feats.unsqueeze(0)), torch.tensor([feats.size(0)]))
    return tokens_one_symbol_per_frame(model, out)


def asrkit_streaming_tokens(model: nn.Module, norm: nn.Module, feats: torch.Tensor, meta: Dict[str, str]) -> List[int]:
    chunk, left = int(meta["asrkit_chunk_size"]), int(meta["asrkit_num_left_chunks"])
    return tokens_one_symbol_per_frame(model, eager_streaming_encoder(model, norm, feats, chunk, left, meta))


# ------------------------------------------------------------------ a data set, both ways


def _cer(pairs: List[Tuple[str, str]]) -> float:
    """Character error rate (%, spaces ignored) of ``(reference, hypothesis)`` pairs."""
    totals, _ = score({str(i): ref for i, (ref, _) in enumerate(pairs)},
                      {str(i): hyp for i, (_, hyp) in enumerate(pairs)}, mode="char")
    return 100.0 * totals.rate


def compare(model: nn.Module, onnx_dir: Path, items: List[dict], streaming: bool, int8: bool,
            feature_cmvn=None, training_features: Optional[Fbank] = None) -> Dict[str, object]:
    """For each ``{"key", "wav", "txt"}``: sherpa-onnx's tokens against asrkit's on the
    runtime's features (and, with ``training_features``, asrkit's on the training
    features); counts of identical token sequences and the CERs."""
    units = [line.rsplit(" ", 1)[0] for line in (onnx_dir / TOKENS_FILE).read_text(encoding="utf-8").splitlines()]
    encoder = _files(onnx_dir, STREAMING_ENCODER_FILE if streaming else ENCODER_FILE, False)["encoder"]
    meta = read_metadata(encoder)
    norm = adapter(model, meta, feature_cmvn)
    train_norm = FbankAdapter(RawFbankNormalization(model.cmvn, feature_cmvn), 0.0).eval()
    recognizer = online_recognizer(onnx_dir, int8) if streaming else offline_recognizer(onnx_dir, int8)
    text = (lambda symbols: " ".join("".join(symbols).split()))
    same = same_train = 0
    pairs: Dict[str, List[Tuple[str, str]]] = {"sherpa": [], "asrkit": [], "asrkit_train": []}
    for item in items:
        samples, rate = sf.read(item["wav"], dtype="float32")
        if streaming:
            tail = tail_padding_s(meta)
            got = decode_streaming(recognizer, [(samples, rate)], tail)[0]
            padded = np.concatenate([samples, np.zeros(int(tail * rate), np.float32)])
            want = asrkit_streaming_tokens(model, norm, runtime_features(meta, padded, rate), meta)
        else:
            got = decode_offline(recognizer, samples, rate)
            want = asrkit_offline_tokens(model, norm, runtime_features(meta, samples, rate))
        want_symbols = sherpa_symbols(want, units)
        same += got == want_symbols
        pairs["sherpa"].append((item["txt"], text(got)))
        pairs["asrkit"].append((item["txt"], text(want_symbols)))
        if training_features is not None:
            feats = training_features.compute(samples, rate)
            train = (asrkit_offline_tokens(model, train_norm, feats) if not streaming else
                     asrkit_streaming_tokens(model, train_norm, feats, meta))
            same_train += got == sherpa_symbols(train, units)
            pairs["asrkit_train"].append((item["txt"], text(sherpa_symbols(train, units))))
    result: Dict[str, object] = {"utterances": len(items), "identical": same,
                                 "cer_sherpa": _cer(pairs["sherpa"]), "cer_asrkit": _cer(pairs["asrkit"])}
    if training_features is not None:
        result.update({"identical_to_training_features": same_train, "cer_asrkit_training_features":
                       _cer(pairs["asrkit_train"])})
    return result
