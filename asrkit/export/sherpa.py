"""sherpa-onnx recognizers for asrkit's ONNX models (:mod:`asrkit.export.onnx`), with the
filterbank asrkit trained on, and the ways sherpa-onnx's examples feed audio.

sherpa-onnx computes fbank itself (kaldi-native-fbank).  For WeNet CTC models it scales
samples to the 16-bit range, as asrkit does, but its ``from_wenet_ctc`` shortcuts keep
kaldi-native-fbank's other defaults, which are not Kaldi's/torchaudio's: ``snip_edges``
false (frames centred, reflected edges) and ``high_freq`` −400 (the top mel bin ends at
Nyquist − 400 Hz).  asrkit (and WeNet) train with ``snip_edges`` true and the top bin at
Nyquist.  :func:`offline_recognizer` and :func:`online_recognizer` build the recognizer
through ``from_wenet_ctc`` and then set those two options to the training ones
(``matched_features=False`` keeps sherpa's defaults, to measure what they cost).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np

from asrkit.export.onnx import OFFLINE_FILE, STREAMING_FILE, TOKENS_FILE

PIECE_S = 0.1          # sherpa-onnx's streaming examples feed 100 ms pieces
TAIL_PADDING_S = 0.66  # ... then this much silence, so the last window fills


def read_metadata(path: Path | str) -> Dict[str, str]:
    """The metadata of an ONNX file (``key -> value``)."""
    import onnx  # (deferred: optional dependency onnx)
    proto = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in proto.metadata_props}


def _match_features(recognizer, meta: Dict[str, str]):
    from sherpa_onnx.offline_recognizer import _Recognizer as OfflineImpl  # (deferred: optional sherpa_onnx)
    from sherpa_onnx.online_recognizer import _Recognizer as OnlineImpl
    for key, fixed in (("asrkit_frame_length_ms", 25.0), ("asrkit_frame_shift_ms", 10.0)):
        if float(meta.get(key, fixed)) != fixed:
            raise ValueError(f"the model was trained with {key[7:]} {meta[key]}; sherpa-onnx's Python API "
                             f"computes {fixed:g} ms frames only")
    feat = recognizer.config.feat_config
    feat.snip_edges = True
    feat.high_freq = 0.0  # 0: Nyquist (Kaldi's convention)
    feat.low_freq = float(meta.get("asrkit_low_freq", 20.0))
    feat.dither = 0.0
    impl = OnlineImpl if type(recognizer).__name__ == "OnlineRecognizer" else OfflineImpl
    recognizer.recognizer = impl(recognizer.config)
    return recognizer


def offline_recognizer(onnx_dir: Path | str, model: str = OFFLINE_FILE, num_threads: int = 1,
                       matched_features: bool = True):
    """``sherpa_onnx.OfflineRecognizer.from_wenet_ctc`` for ``onnx_dir/model`` (greedy CTC)."""
    import sherpa_onnx  # (deferred: optional dependency sherpa_onnx)
    path = Path(onnx_dir) / model
    meta = read_metadata(path)
    recognizer = sherpa_onnx.OfflineRecognizer.from_wenet_ctc(
        model=str(path), tokens=str(Path(onnx_dir) / TOKENS_FILE), num_threads=num_threads,
        sample_rate=int(meta.get("asrkit_sample_rate", 16000)), feature_dim=int(meta.get("asrkit_num_mel_bins", 80)))
    return _match_features(recognizer, meta) if matched_features else recognizer


def online_recognizer(onnx_dir: Path | str, model: str = STREAMING_FILE, chunk_size: int = 16,
                      num_left_chunks: int = 4, num_threads: int = 1, matched_features: bool = True):
    """``sherpa_onnx.OnlineRecognizer.from_wenet_ctc`` for ``onnx_dir/model`` (greedy CTC,
    ``chunk_size`` encoder frames, ``num_left_chunks >= 1`` chunks of attention cache)."""
    import sherpa_onnx  # (deferred: optional dependency sherpa_onnx)
    path = Path(onnx_dir) / model
    meta = read_metadata(path)
    recognizer = sherpa_onnx.OnlineRecognizer.from_wenet_ctc(
        tokens=str(Path(onnx_dir) / TOKENS_FILE), model=str(path), chunk_size=chunk_size,
        num_left_chunks=num_left_chunks, num_threads=num_threads,
        sample_rate=int(meta.get("asrkit_sample_rate", 16000)), feature_dim=int(meta.get("asrkit_num_mel_bins", 80)))
    return _match_features(recognizer, meta) if matched_features else recognizer


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
