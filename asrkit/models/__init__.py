"""Models: conformer/transformer encoders, transformer decoders, hybrid CTC/attention."""
from asrkit.models.asr_model import AsrModel
from asrkit.models.registry import DECODERS, ENCODERS, MODELS, build_model, count_parameters

__all__ = ["AsrModel", "DECODERS", "ENCODERS", "MODELS", "build_model", "count_parameters"]
