"""Adapting a trained model: frozen modules, LoRA adapters, a changed vocabulary, and the
checkpoints of such runs (which name their base model instead of copying it)."""
