"""What sherpa-onnx computes from the audio, per kind of model, against the filterbank a
model was trained on (:mod:`asrkit.export.sherpa` builds the recognizers; the exports
record the filterbank, :func:`asrkit.export.onnx.fbank_metadata`).

sherpa-onnx's feature extractor is kaldi-native-fbank with its ``FeatureExtractorConfig``
defaults -- ``snip_edges`` false, mel filters from 20 Hz to Nyquist − 400 Hz, 25 / 10 ms
frames -- which its WeNet CTC constructors (``from_wenet_ctc``) cannot change; they scale
samples to the 16-bit range (``normalize_samples`` false), its transducer constructors keep
them in [-1, 1] (``normalize_samples`` true).  docs/export.md has the table.
"""
from __future__ import annotations

from typing import Dict, Optional

# What sherpa-onnx's feature extractor computes for each kind of model (FeatureExtractorConfig's
# defaults, which from_wenet_ctc cannot change, and the normalize_samples each recognizer sets:
# false for WeNet CTC models -- samples x 32768 --, the default true for transducers), in the
# keys of asrkit.export.onnx.FBANK_DEFAULTS.  Sample rate and mel bins are the constructors'
# arguments, taken from the model's metadata.
_KALDI_NATIVE_FBANK = {"snip_edges": False, "high_freq": -400.0, "low_freq": 20.0, "frame_length_ms": 25.0,
                       "frame_shift_ms": 10.0}
RUNTIME_FBANK: Dict[str, Dict[str, object]] = {
    "wenet_ctc": dict(_KALDI_NATIVE_FBANK, sample_scale=32768.0),
    "transducer": dict(_KALDI_NATIVE_FBANK, sample_scale=1.0),
}
_RUNTIME_NAMES = {"wenet_ctc": "a WeNet CTC model (from_wenet_ctc)", "transducer": "a transducer (from_transducer)"}
# the fbank_conf key that sets each compared option, where one does
_CONFIG_KEYS = {"frame_length_ms": "frame_length", "frame_shift_ms": "frame_shift", "high_freq": "high_freq",
                "snip_edges": "snip_edges", "sample_scale": "sample_scale"}


class FeatureMismatchError(ValueError):
    """The model's features are not what the runtime computes (one line: what differs and
    what to set in ``fbank_conf``)."""


class UnexportableModel(ValueError):
    """A model the exports cannot hold (one line: why, and what to use instead)."""


class FeatureMismatchWarning(UserWarning):
    """A recognizer built with ``allow_feature_mismatch`` on a model whose features are not
    the runtime's: its transcripts will not be asrkit's."""


def _top_edge(high_freq: float, sample_rate: float) -> float:
    return high_freq if high_freq > 0 else sample_rate / 2 + high_freq


def _shown(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else f"{value:g}"


def runtime_feature_mismatch(fbank: Dict[str, object], runtime: str = "wenet_ctc") -> Optional[str]:
    """``None`` when sherpa-onnx computes the features ``fbank`` describes (keys of
    :data:`asrkit.export.onnx.FBANK_DEFAULTS`, e.g. from
    :func:`asrkit.export.onnx.fbank_from_metadata`) for a model of kind ``runtime``
    (``wenet_ctc`` or ``transducer``), else one line: what differs and what to set in
    ``dataset_conf.fbank_conf`` (then retrain; the CMVN statistics too)."""
    want = RUNTIME_FBANK[runtime]
    rate = float(fbank.get("sample_rate", 16000))
    differ, fixes = [], []
    for key, runtime_value in want.items():
        value = fbank.get(key)
        if key == "high_freq":
            same = _top_edge(float(value), rate) == _top_edge(float(runtime_value), rate)
        elif isinstance(runtime_value, bool):
            same = bool(value) == runtime_value
        else:
            same = float(value) == float(runtime_value)
        if same:
            continue
        name = _CONFIG_KEYS.get(key, key)
        differ.append(f"{name} {_shown(value)} (sherpa-onnx: {_shown(runtime_value)})")
        fixes.append(f"{name}: {_shown(runtime_value)}" if key in _CONFIG_KEYS
                     else f"{name} {_shown(runtime_value)} (fixed in asrkit)")
    if not differ:
        return None
    return (f"the model's features are not what sherpa-onnx computes for {_RUNTIME_NAMES[runtime]}: "
            f"{', '.join(differ)}; its transcripts there will differ from asrkit's. Train with "
            f"dataset_conf.fbank_conf {', '.join(fixes)} (and CMVN statistics of those features)")


def export_feature_refusal(feats_type: str) -> Optional[str]:
    """Why a model trained on ``dataset_conf.feats_type`` features cannot be exported, or
    ``None``: asrkit's exports (the TorchScript archive, WeNet's runtime layout; the ONNX
    files, sherpa-onnx's WeNet CTC layout) take Kaldi fbank, which those runtimes compute from
    the audio; Whisper's log-mel spectrogram (normalised over the whole input) is none of
    theirs, and sherpa-onnx's own Whisper layout is not written by asrkit."""
    if feats_type == "fbank":
        return None
    return (f"a model of dataset_conf.feats_type {feats_type} cannot be exported: the TorchScript archive and "
            f"the ONNX files take Kaldi fbank, what WeNet's runtime and sherpa-onnx compute; decode it with "
            f"asrkit recognize, asrkit transcribe or asrkit serve (docs/whisper.md)")
