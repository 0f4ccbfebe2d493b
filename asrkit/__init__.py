"""asrkit: config-driven conformer CTC/attention speech recognition training."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # ``asrkit.load_model`` without importing torch and the models at ``import asrkit``
    if name == "load_model":
        from asrkit.transcribe import load_model
        return load_model
    raise AttributeError(f"module 'asrkit' has no attribute {name!r}")


__all__ = ["load_model"]
