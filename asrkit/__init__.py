"""asrkit: config-driven conformer CTC/attention speech recognition training."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # ``import asrkit`` does not import torch and the models (tests/transcribe/test_load_model.py checks it)
    if name == "load_model":
        from asrkit.transcribe import load_model  # (deferred: torch and the models, to first use)
        return load_model
    raise AttributeError(f"module 'asrkit' has no attribute {name!r}")


__all__ = ["load_model"]
