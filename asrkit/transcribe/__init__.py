"""Transcription of files and samples with token and word times:
``asrkit.load_model(EXP_DIR_OR_FINAL_ZIP).transcribe(path_or_samples)`` (docs/transcribe.md)."""
from asrkit.transcribe.loading import ModelLoadError, find_checkpoint
from asrkit.transcribe.result import TokenTime, Transcript, WordTime, group_words
from asrkit.transcribe.segments import Segmentation, SegmentationError
from asrkit.transcribe.transcriber import AudioError, Transcriber, load_model

__all__ = ["AudioError", "ModelLoadError", "Segmentation", "SegmentationError", "TokenTime", "Transcriber", "Transcript", "WordTime",
           "find_checkpoint", "group_words", "load_model"]
