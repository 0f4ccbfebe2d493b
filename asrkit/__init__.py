"""asrkit: config-driven conformer CTC/attention speech recognition training."""

__version__ = "0.1.0"
