"""Where the speech is: the Silero voice-activity detector (the ``silero-vad`` package, MIT;
its wheel carries the models).

Why Silero (measured in docs/transcribe.md, "Choosing the detector"): it is a trained
neural detector that says "no speech" for digital silence, noise and tones at any level
the issue tables list, and finds the 0.2 s pauses between utterances; webrtcvad's GMM
calls tones and loud noise speech, and the model's own CTC posteriors are not a speech
detector (a recognizer trained without silence-only utterances emits tokens on silence and
noise, and a full-context model's blank runs are not pauses).

The model is the package's *sequence* ONNX form (``load_silero_vad(sequence=True)``): the
same per-frame probabilities as the stock streaming model, one onnxruntime call per 512
frames instead of one per frame (10 minutes of audio in about a second on one core).
It reads 16 kHz audio in frames of 512 samples (32 ms) and gives one speech probability per
frame; :func:`speech_regions` turns them into speech regions with the package's own state
machine (hysteresis, minimum silence and speech, padding, the split of over-long speech at
its longest inner silence).
"""
from __future__ import annotations

import threading
import warnings
from typing import Optional

import numpy as np
import torch

VAD_RATE = 16000   # Hz: the rate the detector reads (its other rate, 8 kHz, is never used here)
FRAME_SAMPLES = 512  # samples per probability at VAD_RATE (32 ms)

_MODEL = None
_LOCK = threading.Lock()
_RUN_LOCK = threading.Lock()  # the model keeps its state between frames: one call at a time (asrkit serve's pool)


class VadUnavailableError(RuntimeError):
    """The ``silero-vad`` package (or onnxruntime, which runs its model) is not installed."""


def _silero():
    """The ``silero_vad`` module.  Its import calls ``torch.set_num_threads(1)`` (a side
    effect of the package's ``model.py``); the caller's thread count is put back."""
    threads = torch.get_num_threads()
    try:
        import silero_vad
    except ImportError as e:
        raise VadUnavailableError(f"the Silero VAD is not installed ({e}): pip install silero-vad, "
                                  "or transcribe without it (Segmentation(vad=False), --no_vad)") from None
    finally:
        torch.set_num_threads(threads)
    return silero_vad


def _model():
    """The sequence ONNX model, loaded once per process."""
    global _MODEL
    with _LOCK:
        if _MODEL is None:
            try:
                with warnings.catch_warnings():  # (the package's importlib.resources.path call is deprecated)
                    warnings.simplefilter("ignore", DeprecationWarning)
                    _MODEL = _silero().load_silero_vad(sequence=True)
            except ImportError as e:  # onnxruntime missing
                raise VadUnavailableError(f"the Silero VAD needs onnxruntime ({e}): pip install onnxruntime") from None
        return _MODEL


def speech_probabilities(samples: np.ndarray) -> np.ndarray:
    """P(speech) of each :data:`FRAME_SAMPLES`-sample frame of ``samples`` (float32 at
    :data:`VAD_RATE`, ``[T]``; the last frame zero-padded), ``[ceil(T / 512)]``."""
    samples = np.ascontiguousarray(samples, dtype=np.float32).reshape(-1)
    if samples.size == 0:
        return np.zeros(0, dtype=np.float32)
    model = _model()
    with _RUN_LOCK:
        return np.asarray(model.audio_forward(samples, sampling_rate=VAD_RATE), dtype=np.float32)


def speech_regions(probs: np.ndarray, num_samples: int, *, threshold: float, min_pause_s: float,
                   min_speech_s: float, pad_s: float, max_speech_s: Optional[float]) -> list[tuple[int, int]]:
    """``(start, end)`` sample ranges at :data:`VAD_RATE` of the speech in ``probs``
    (:func:`speech_probabilities` of ``num_samples`` samples), in order, not overlapping:

    * speech starts at a frame with P >= ``threshold`` and ends at the first of at least
      ``min_pause_s`` of frames below ``threshold - 0.15`` (so a pause shorter than
      ``min_pause_s`` never cuts);
    * a region shorter than ``min_speech_s`` is dropped;
    * each region is widened by ``pad_s`` on both sides; where two regions are less than
      ``2 pad_s`` apart the boundary goes to the middle of the pause between them;
    * a region longer than ``max_speech_s`` (``None``: no limit) is split at its longest
      inner pause of at least 98 ms, and where it has none, at the limit.
    """
    silero = _silero()
    regions = silero.get_speech_timestamps_from_probs(
        [float(p) for p in probs], sampling_rate=VAD_RATE, threshold=threshold,
        min_speech_duration_ms=int(round(min_speech_s * 1000)),
        max_speech_duration_s=float("inf") if max_speech_s is None else float(max_speech_s),
        min_silence_duration_ms=int(round(min_pause_s * 1000)), speech_pad_ms=int(round(pad_s * 1000)),
        audio_length_samples=int(num_samples))
    return [(int(r["start"]), int(r["end"])) for r in regions if int(r["end"]) > int(r["start"])]
