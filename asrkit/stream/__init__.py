"""Streaming recognition: incremental features, endpointing."""
