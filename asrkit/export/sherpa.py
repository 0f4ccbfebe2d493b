"""sherpa-onnx recognizers for asrkit's ONNX models (:mod:`asrkit.export.onnx`), built
through sherpa-onnx's public API only, the features that runtime computes, and the ways
sherpa-onnx's examples feed audio.

sherpa-onnx computes the filterbank itself (kaldi-native-fbank, configured by its
``FeatureExtractorConfig``), and its WeNet CTC constructors
(``OfflineRecognizer.from_wenet_ctc``, ``OnlineRecognizer.from_wenet_ctc``) take only the
sample rate and the number of mel bins: everything else is kaldi-native-fbank's default,
which is not Kaldi's/torchaudio's/WeNet's -- ``snip_edges`` false (frames centred,
reflected edges) and the top mel edge at Nyquist − 400 Hz -- and for WeNet CTC models the
recognizer scales samples to the 16-bit range (``normalize_samples`` false), as WeNet does.
Its transducer constructors keep ``normalize_samples`` true: samples as read, in [-1, 1]
(:data:`RUNTIME_FBANK`).  Every user of the runtime -- the C++ binaries, the websocket
server, the mobile apps, the other language bindings -- gets those features, so a model
decodes there as in asrkit only when it was trained on them: ``dataset_conf.fbank_conf``
``snip_edges: false`` and ``high_freq: -400`` (and for a transducer ``sample_scale: 1``).

The ONNX files record the features the model was trained on (``asrkit_*`` metadata,
:func:`asrkit.export.onnx.fbank_metadata`); :func:`offline_recognizer` and
:func:`online_recognizer` refuse (:class:`FeatureMismatchError`, one line saying what to
set) a model whose features are not the runtime's, or with ``allow_feature_mismatch``
build it anyway with a :class:`FeatureMismatchWarning` (to measure what the mismatch
costs).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict

import numpy as np

from asrkit.export.onnx import OFFLINE_FILE, STREAMING_FILE, TOKENS_FILE, fbank_from_metadata
from asrkit.export.runtime_features import (RUNTIME_FBANK, FeatureMismatchError, FeatureMismatchWarning,
                                            runtime_feature_mismatch)

__all__ = ["RUNTIME_FBANK", "FeatureMismatchError", "FeatureMismatchWarning", "runtime_feature_mismatch",
           "check_runtime_features", "read_metadata", "offline_recognizer", "online_recognizer",
           "decode_offline", "decode_streaming", "PIECE_S", "TAIL_PADDING_S"]

PIECE_S = 0.1          # sherpa-onnx's streaming examples feed 100 ms pieces
TAIL_PADDING_S = 0.66  # ... then this much silence, so the last window fills


def check_runtime_features(meta: Dict[str, str], runtime: str = "wenet_ctc", allow_mismatch: bool = False,
                           name: str = "") -> None:
    """Refuse (:class:`FeatureMismatchError`) the model whose ONNX metadata ``meta`` says
    it was trained on other features than sherpa-onnx computes for it
    (:func:`runtime_feature_mismatch`; a file without the ``asrkit_*`` fbank keys was
    exported before they were recorded: WeNet's fbank); with ``allow_mismatch`` warn
    (:class:`FeatureMismatchWarning`) instead."""
    problem = runtime_feature_mismatch(fbank_from_metadata(meta), runtime)
    if problem is None:
        return
    message = f"{name}: {problem}" if name else problem
    if not allow_mismatch:
        raise FeatureMismatchError(message)
    warnings.warn(message, FeatureMismatchWarning, stacklevel=3)


def read_metadata(path: Path | str) -> Dict[str, str]:
    """The metadata of an ONNX file (``key -> value``)."""
    import onnx  # (deferred: optional dependency onnx)
    proto = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in proto.metadata_props}


def offline_recognizer(onnx_dir: Path | str, model: str = OFFLINE_FILE, num_threads: int = 1,
                       allow_feature_mismatch: bool = False):
    """``sherpa_onnx.OfflineRecognizer.from_wenet_ctc`` (greedy CTC) for ``onnx_dir/model``,
    with the sample rate and mel bins of its metadata; refused when the model's features
    are not the runtime's (:func:`check_runtime_features`)."""
    import sherpa_onnx  # (deferred: optional dependency sherpa_onnx)
    path = Path(onnx_dir) / model
    meta = read_metadata(path)
    check_runtime_features(meta, "wenet_ctc", allow_feature_mismatch, str(path))
    return sherpa_onnx.OfflineRecognizer.from_wenet_ctc(
        model=str(path), tokens=str(Path(onnx_dir) / TOKENS_FILE), num_threads=num_threads,
        sample_rate=int(meta.get("asrkit_sample_rate", 16000)), feature_dim=int(meta.get("asrkit_num_mel_bins", 80)))


def online_recognizer(onnx_dir: Path | str, model: str = STREAMING_FILE, chunk_size: int = 16,
                      num_left_chunks: int = 4, num_threads: int = 1, allow_feature_mismatch: bool = False):
    """``sherpa_onnx.OnlineRecognizer.from_wenet_ctc`` (greedy CTC, ``chunk_size`` encoder
    frames, ``num_left_chunks >= 1`` chunks of attention cache) for ``onnx_dir/model``;
    refused as :func:`offline_recognizer`."""
    import sherpa_onnx  # (deferred: optional dependency sherpa_onnx)
    path = Path(onnx_dir) / model
    meta = read_metadata(path)
    check_runtime_features(meta, "wenet_ctc", allow_feature_mismatch, str(path))
    return sherpa_onnx.OnlineRecognizer.from_wenet_ctc(
        tokens=str(Path(onnx_dir) / TOKENS_FILE), model=str(path), chunk_size=chunk_size,
        num_left_chunks=num_left_chunks, num_threads=num_threads,
        sample_rate=int(meta.get("asrkit_sample_rate", 16000)), feature_dim=int(meta.get("asrkit_num_mel_bins", 80)))


def decode_offline(recognizer, samples: np.ndarray, sample_rate: int):
    """One utterance (float samples in [-1, 1)) -> sherpa-onnx's result (``.text``,
    ``.tokens``, ``.timestamps``)."""
    stream = recognizer.create_stream()
    stream.accept_waveform(sample_rate, np.ascontiguousarray(samples, dtype=np.float32))
    recognizer.decode_stream(stream)
    return stream.result


def decode_streaming(recognizer, samples: np.ndarray, sample_rate: int, piece_s: float = PIECE_S,
                     tail_padding_s: float = TAIL_PADDING_S) -> str:
    """Feed one utterance in ``piece_s`` pieces, decoding whenever a chunk is ready, then
    ``tail_padding_s`` of silence and the end of input, as sherpa-onnx's examples do;
    returns the text."""
    stream = recognizer.create_stream()
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    piece = max(int(piece_s * sample_rate), 1)
    for start in range(0, len(samples), piece):
        stream.accept_waveform(sample_rate, samples[start:start + piece])
        while recognizer.is_ready(stream):
            recognizer.decode_stream(stream)
    stream.accept_waveform(sample_rate, np.zeros(int(tail_padding_s * sample_rate), dtype=np.float32))
    stream.input_finished()
    while recognizer.is_ready(stream):
        recognizer.decode_stream(stream)
    return recognizer.get_result(stream)
