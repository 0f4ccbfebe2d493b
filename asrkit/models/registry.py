"""Name -> class maps for encoders, decoders and models, and ``build_model``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from asrkit.data.features import load_cmvn
from asrkit.models.asr_model import AsrModel
from asrkit.models.cmvn import GlobalCMVN
from asrkit.models.ctc import CTC
from asrkit.models.decoder import BiTransformerDecoder, TransformerDecoder
from asrkit.models.encoder import ConformerEncoder, TransformerEncoder

ENCODERS: dict[str, type[nn.Module]] = {
    "conformer": ConformerEncoder,
    "transformer": TransformerEncoder,
}
DECODERS: dict[str, type[nn.Module]] = {
    "transformer": TransformerDecoder,
    "bitransformer": BiTransformerDecoder,
}
# "asrmodel" is the spelling some WeNet recipes use for the same model
MODELS: dict[str, type[AsrModel]] = {"asr_model": AsrModel, "asrmodel": AsrModel}


def _lookup(table: dict[str, Any], kind: str, name: str) -> Any:
    if name not in table:
        raise ValueError(f"unknown {kind} {name!r}; registered: {sorted(table)}")
    return table[name]


def build_cmvn(cfg, input_dim: int, load_stats: bool) -> Optional[GlobalCMVN]:
    """``GlobalCMVN`` from ``cmvn_conf.cmvn_file`` when ``cmvn: global_cmvn``.  With
    ``load_stats=False`` the layer starts as identity (mean 0, istd 1), to be filled
    from a checkpoint's ``state_dict``."""
    if cfg.cmvn is None:
        return None
    if not load_stats:
        return GlobalCMVN(torch.zeros(input_dim), torch.ones(input_dim))
    if not cfg.cmvn_conf.cmvn_file:
        raise ValueError("cmvn: global_cmvn needs cmvn_conf.cmvn_file")
    if not Path(cfg.cmvn_conf.cmvn_file).is_file():
        raise FileNotFoundError(f"cmvn_conf.cmvn_file not found: {cfg.cmvn_conf.cmvn_file}")
    mean, istd = load_cmvn(cfg.cmvn_conf.cmvn_file)
    if mean.numel() != input_dim:
        raise ValueError(f"CMVN file {cfg.cmvn_conf.cmvn_file} has dimension {mean.numel()}, "
                         f"features have {input_dim}")
    return GlobalCMVN(mean, istd)


def build_model(cfg, input_dim: int, vocab_size: int, *, load_cmvn_stats: bool = True) -> AsrModel:
    """Build the model described by ``cfg`` (an ``asrkit.config.TrainConfig``) for
    ``input_dim``-dimensional features and ``vocab_size`` units (``<sos/eos>`` last).

    ``cfg.input_dim`` / ``cfg.output_dim``, when set, must agree with the arguments.
    Set ``load_cmvn_stats=False`` when a checkpoint will supply the CMVN buffers."""
    if cfg.input_dim is not None and cfg.input_dim != input_dim:
        raise ValueError(f"config input_dim {cfg.input_dim} != feature dimension {input_dim}")
    if cfg.output_dim is not None and cfg.output_dim != vocab_size:
        raise ValueError(f"config output_dim {cfg.output_dim} != vocabulary size {vocab_size}")
    if vocab_size < 3:
        raise ValueError(f"vocab_size must be >= 3 (<blank>, <unk>, <sos/eos>), got {vocab_size}")
    data_cmvn = getattr(getattr(cfg, "dataset_conf", None), "cmvn_file", None)
    if cfg.cmvn is not None and data_cmvn:
        raise ValueError("CMVN is configured twice: cmvn: global_cmvn (model layer) and "
                         "dataset_conf.cmvn_file (data pipeline); keep one")
    mc = cfg.model_conf
    if cfg.decoder == "bitransformer" and mc.reverse_weight <= 0.0 and mc.ctc_weight < 1.0:
        raise ValueError("decoder bitransformer trains its right-to-left half only with "
                         "model_conf.reverse_weight > 0")
    if cfg.decoder != "bitransformer" and mc.reverse_weight > 0.0:
        raise ValueError("model_conf.reverse_weight > 0 needs decoder: bitransformer")
    encoder = _lookup(ENCODERS, "encoder", cfg.encoder)(input_dim, cfg.encoder_conf)
    d_model = cfg.encoder_conf.output_size
    decoder = (_lookup(DECODERS, "decoder", cfg.decoder)(vocab_size, d_model, cfg.decoder_conf)
               if mc.ctc_weight < 1.0 else None)
    ctc = CTC(vocab_size, d_model, cfg.ctc_conf.ctc_blank_id) if mc.ctc_weight > 0.0 else None
    model_cls = _lookup(MODELS, "model", cfg.model)
    return model_cls(vocab_size, encoder, decoder, ctc, build_cmvn(cfg, input_dim, load_cmvn_stats),
                     ctc_weight=mc.ctc_weight, lsm_weight=mc.lsm_weight,
                     reverse_weight=mc.reverse_weight if cfg.decoder == "bitransformer" else 0.0,
                     length_normalized_loss=mc.length_normalized_loss)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
