"""Config versions: what a key meant when a saved config was written.

``config_version`` (top level) says which meaning of the keys a config uses.  The
trainer writes the current :data:`CONFIG_VERSION` into every ``train.yaml`` and into
every checkpoint's ``config``.

* **1** (configs saved before the key existed): ``encoder_conf.pos_enc_layer_type:
  rel_pos`` -- and, for a conformer, an unset ``pos_enc_layer_type`` -- meant asrkit's
  Transformer-XL relative positions, now called ``rel_pos_xl``; and text was tokenized
  by asrkit's rules, now ``tokenizer_conf.rules: asrkit``.
* **2**: ``rel_pos`` means WeNet's relative positional encoding (absolute table rows,
  no relative shift), and an unset ``tokenizer_conf.rules`` WeNet's tokenization, as in
  WeNet's configs.

Which configs are version 1 when the key is absent: a config **saved by asrkit's trainer**
(it carries ``input_dim`` and ``output_dim``) that has none of the keys WeNet's trainer
adds (``vocab_size``, ``model_dir``, ``train_engine``) and is not a Whisper config
(``model: whisper`` or ``tokenizer: whisper``: asrkit had neither before version 2; WeNet's
Whisper converter writes ``input_dim`` and ``output_dim`` without those keys).  Every other config without the
key -- a recipe's ``conf/*.yaml``, a WeNet ``train.yaml`` -- is read with the current
meaning.  :func:`upgrade` rewrites a version-1 config into current keys (``rel_pos_xl``
spelled out) before it is validated, so a model rebuilt from an old experiment folder
computes what it was trained to compute.
"""
from __future__ import annotations

from typing import Optional

CONFIG_VERSION = 2

# keys WeNet's trainer adds to the train.yaml it saves (asrkit's never had them)
_WENET_SAVED_KEYS = ("vocab_size", "model_dir", "train_engine")


def saved_version(raw: dict) -> int:
    """The config version ``raw`` was written with (see the module docstring)."""
    version = raw.get("config_version")
    if version is not None:
        return version if isinstance(version, int) else CONFIG_VERSION  # (the schema reports bad types)
    saved_by_asrkit = ("input_dim" in raw and "output_dim" in raw
                       and not any(k in raw for k in _WENET_SAVED_KEYS)
                       and "whisper" not in (raw.get("model"), raw.get("tokenizer")))
    return 1 if saved_by_asrkit else CONFIG_VERSION


def upgrade(raw: dict, notes: Optional[list[str]] = None) -> dict:
    """``raw`` with its keys in the current meaning and ``config_version`` set to
    :data:`CONFIG_VERSION` (a new dict; ``raw`` is not changed).  A version newer than
    this asrkit knows is left for the schema to refuse."""
    version = saved_version(raw)
    if version > CONFIG_VERSION:
        return raw
    out = dict(raw)
    if version < 2:
        enc = dict(out.get("encoder_conf") or {})
        pos = enc.get("pos_enc_layer_type")
        if pos == "rel_pos" or (pos is None and out.get("encoder", "conformer") == "conformer"):
            enc["pos_enc_layer_type"] = "rel_pos_xl"
            out["encoder_conf"] = enc
            if notes is not None:
                notes.append("config_version 1 (saved before asrkit named its Transformer-XL relative "
                             "positions): encoder_conf.pos_enc_layer_type read as rel_pos_xl")
        tok = dict(out.get("tokenizer_conf") or {})
        if "rules" not in tok:
            tok["rules"] = "asrkit"
            out["tokenizer_conf"] = tok
            if notes is not None:
                notes.append("config_version 1: tokenizer_conf.rules read as asrkit (its tokenization then)")
    out["config_version"] = CONFIG_VERSION
    return out
