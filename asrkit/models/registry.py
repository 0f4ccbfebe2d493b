"""Registries: name -> class for encoders and decoders, name -> builder for models, and
``build_model``, the one way a model is built from a config.

The names a config gives (``encoder``, ``decoder``, ``model``) are checked here, against
these tables (:func:`name_problems`): by ``build_model``, and by config loading
(``asrkit.config.TrainConfig.validate``), so a config naming nothing registered is refused
when it is loaded."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn

from asrkit.data.features import CmvnError, load_cmvn
from asrkit.models.asr_model import AsrModel
from asrkit.models.cmvn import GlobalCMVN
from asrkit.models.branchformer import BranchformerEncoder
from asrkit.models.ctc import CTC
from asrkit.models.decoder import BiTransformerDecoder, TransformerDecoder
from asrkit.models.e_branchformer import EBranchformerEncoder
from asrkit.models.efficient_conformer import EfficientConformerEncoder
from asrkit.models.encoder import ConformerEncoder, TransformerEncoder
from asrkit.models.schema import whisper_language
from asrkit.models.squeezeformer import SqueezeformerEncoder
from asrkit.models.transducer.joint import JOINTS, TransducerJoint
from asrkit.models.transducer.loss import check_rnnt_loss
from asrkit.models.transducer.model import Transducer
from asrkit.models.transducer.predictor import PREDICTORS, Predictor
from asrkit.models.transducer.schema import PREDICTOR_PARAMS
from asrkit.models.whisper import WhisperAsrModel, check_whisper_shape, special_tokens
from asrkit.schema import one_of
from asrkit.text.vocabulary import Vocabulary

ENCODERS: dict[str, type[nn.Module]] = {
    "conformer": ConformerEncoder,
    "transformer": TransformerEncoder,
    "branchformer": BranchformerEncoder,
    "e_branchformer": EBranchformerEncoder,
    "squeezeformer": SqueezeformerEncoder,
    "efficientConformer": EfficientConformerEncoder,
}
DECODERS: dict[str, type[nn.Module]] = {
    "transformer": TransformerDecoder,
    "bitransformer": BiTransformerDecoder,
}

def _lookup(table: dict[str, Any], key: str, name: str) -> Any:
    """``table[name]``; ValueError with the message of :func:`name_problems` when ``name``
    is not in ``table`` (the registry of config key ``key``)."""
    problem = one_of(lambda: table)(name)
    if problem:
        raise ValueError(f"{key}: {problem}")
    return table[name]


def model_cmvn_stats(cfg, input_dim: int, features: Optional[dict] = None) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """``(mean, istd)`` of ``cmvn_conf.cmvn_file`` when ``cmvn: global_cmvn`` (None without a
    CMVN layer); :class:`CmvnError` when the file is unset, unreadable, of another dimension
    or (with ``features``: training) records other features."""
    if cfg.cmvn is None:
        return None
    if not cfg.cmvn_conf.cmvn_file:
        raise CmvnError("cmvn: global_cmvn needs cmvn_conf.cmvn_file (tools/compute_cmvn_stats.py)")
    return load_cmvn(cfg.cmvn_conf.cmvn_file, input_dim, features)


def build_cmvn(cfg, input_dim: int, load_stats: bool,
               stats: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> Optional[GlobalCMVN]:
    """``GlobalCMVN`` when ``cmvn: global_cmvn``: from ``stats`` (``(mean, istd)`` already
    loaded by :func:`model_cmvn_stats`) or, without them, from ``cmvn_conf.cmvn_file``.  With
    ``load_stats=False`` the layer starts as identity (mean 0, istd 1), to be filled from a
    checkpoint's ``state_dict``."""
    if cfg.cmvn is None:
        return None
    if not load_stats:
        return GlobalCMVN(torch.zeros(input_dim), torch.ones(input_dim))
    mean, istd = stats if stats is not None else model_cmvn_stats(cfg, input_dim)
    return GlobalCMVN(mean, istd)


def check_cmvn_placement(cfg) -> None:
    """:class:`CmvnError` when CMVN is configured twice: the model layer (``cmvn:
    global_cmvn``) and the data pipeline (``dataset_conf.cmvn_file``)."""
    data_cmvn = getattr(getattr(cfg, "dataset_conf", None), "cmvn_file", None)
    if cfg.cmvn is not None and data_cmvn:
        raise CmvnError(f"CMVN is configured twice: cmvn: global_cmvn (model layer) and "
                        f"dataset_conf.cmvn_file {data_cmvn} (data pipeline); keep one")


def _heads(cfg, vocabulary: Vocabulary, ctc_weight: float, attention_weight: float
           ) -> tuple[Optional[nn.Module], Optional[CTC]]:
    """``(decoder, ctc)`` for a model whose attention and CTC losses have these weights:
    ``cfg.decoder`` from :data:`DECODERS` when ``attention_weight > 0``, a CTC head when
    ``ctc_weight > 0`` (None otherwise), after the checks of ``reverse_weight`` and
    ``ctc_conf.ctc_blank_id`` against them.  (Built after the encoder: the order in which
    parameters are initialised from torch's generator is part of a seeded run.)"""
    mc = cfg.model_conf
    if cfg.decoder == "bitransformer" and mc.reverse_weight <= 0.0 and attention_weight > 0.0:
        raise ValueError("decoder bitransformer trains its right-to-left half only with "
                         "model_conf.reverse_weight > 0")
    if cfg.decoder != "bitransformer" and mc.reverse_weight > 0.0:
        raise ValueError("model_conf.reverse_weight > 0 needs decoder: bitransformer")
    if ctc_weight > 0.0 and cfg.ctc_conf.ctc_blank_id != vocabulary.blank_id:
        raise ValueError(f"ctc_conf.ctc_blank_id {cfg.ctc_conf.ctc_blank_id} is not the dictionary's "
                         f"<blank> id {vocabulary.blank_id}")
    d_model = cfg.encoder_conf.output_size
    decoder = (_lookup(DECODERS, "decoder", cfg.decoder)(vocabulary.size, d_model, cfg.decoder_conf)
               if attention_weight > 0.0 else None)
    ctc = CTC(vocabulary.size, d_model, vocabulary.blank_id) if ctc_weight > 0.0 else None
    return decoder, ctc


def build_asr_model(cfg, input_dim: int, vocabulary: Vocabulary, cmvn: Optional[GlobalCMVN]) -> AsrModel:
    """The hybrid CTC/attention model (``model: asr_model``): ``cfg.encoder`` from
    :data:`ENCODERS`, ``cfg.decoder`` from :data:`DECODERS` (left out when ``ctc_weight``
    is 1), a CTC head (left out when ``ctc_weight`` is 0)."""
    mc = cfg.model_conf
    encoder = _lookup(ENCODERS, "encoder", cfg.encoder)(input_dim, cfg.encoder_conf)
    decoder, ctc = _heads(cfg, vocabulary, mc.ctc_weight, 1.0 - mc.ctc_weight)
    return AsrModel(vocabulary, encoder, decoder, ctc, cmvn,
                    ctc_weight=mc.ctc_weight, lsm_weight=mc.lsm_weight,
                    reverse_weight=mc.reverse_weight if cfg.decoder == "bitransformer" else 0.0,
                    length_normalized_loss=mc.length_normalized_loss)


def build_predictor(cfg, vocabulary: Vocabulary) -> Predictor:
    """``cfg.predictor`` (WeNet's default ``rnn``) from :data:`PREDICTORS`, with the keys of
    ``predictor_conf`` that kind takes, its defaults for those not given
    (:data:`~asrkit.models.transducer.schema.PREDICTOR_PARAMS`; the config's validation has
    checked that the required ones are there)."""
    kind = cfg.predictor or "rnn"
    params = {key: default if (given := getattr(cfg.predictor_conf, key)) is None else given
              for key, default in PREDICTOR_PARAMS[kind].items()}
    return _lookup(PREDICTORS, "predictor", kind)(vocabulary.size, **params)


def build_joint(cfg, vocabulary: Vocabulary, enc_size: int, pred_size: int) -> TransducerJoint:
    """``cfg.joint`` (WeNet's default ``transducer_joint``) from :data:`JOINTS` with
    ``joint_conf``, for encoder and predictor outputs of ``enc_size`` and ``pred_size``
    (``joint_conf.enc_output_size`` / ``pred_output_size``, when given, must be those)."""
    jc = cfg.joint_conf
    for key, given, actual in (("enc_output_size", jc.enc_output_size, enc_size),
                               ("pred_output_size", jc.pred_output_size, pred_size)):
        if given is not None and given != actual:
            part = "encoder" if key.startswith("enc") else "predictor"
            raise ValueError(f"joint_conf.{key} {given} is not the {part}'s output size {actual}")
    return _lookup(JOINTS, "joint", cfg.joint or "transducer_joint")(
        vocabulary.size, enc_size, pred_size, jc.join_dim, prejoin_linear=jc.prejoin_linear,
        postjoin_linear=jc.postjoin_linear, joint_mode=jc.joint_mode, activation=jc.activation)


def build_transducer(cfg, input_dim: int, vocabulary: Vocabulary, cmvn: Optional[GlobalCMVN]) -> Transducer:
    """The transducer (``model: transducer``, :class:`~asrkit.models.transducer.model.Transducer`):
    the encoder, the decoder when ``attention_weight > 0``, a CTC head when ``ctc_weight >
    0``, :func:`build_predictor` and :func:`build_joint` (WeNet's order).  Raises
    :class:`~asrkit.models.transducer.loss.RnntLossUnavailable` first when the installed
    torchaudio cannot compute the RNN-T loss."""
    check_rnnt_loss()
    mc = cfg.model_conf
    if cfg.predictor_conf is None or cfg.joint_conf is None:
        raise ValueError("model: transducer needs predictor_conf and joint_conf")
    transducer = 1.0 if mc.transducer_weight is None else mc.transducer_weight  # WeNet's defaults
    attention = 0.0 if mc.attention_weight is None else mc.attention_weight
    encoder = _lookup(ENCODERS, "encoder", cfg.encoder)(input_dim, cfg.encoder_conf)
    decoder, ctc = _heads(cfg, vocabulary, mc.ctc_weight, attention)
    predictor = build_predictor(cfg, vocabulary)
    joint = build_joint(cfg, vocabulary, encoder.output_size(), predictor.output_size())
    return Transducer(vocabulary, encoder, predictor, joint, decoder, ctc, cmvn,
                      transducer_weight=transducer, ctc_weight=mc.ctc_weight, attention_weight=attention,
                      lsm_weight=mc.lsm_weight,
                      reverse_weight=mc.reverse_weight if decoder is not None and cfg.decoder == "bitransformer"
                      else 0.0, length_normalized_loss=mc.length_normalized_loss,
                      rnnt_type=mc.rnnt_type or "regular")


def build_whisper_model(cfg, input_dim: int, vocabulary: Vocabulary, cmvn: Optional[GlobalCMVN]) -> WhisperAsrModel:
    """WeNet's Whisper (``model: whisper``, :class:`~asrkit.models.whisper.WhisperAsrModel`):
    ``encoder: transformer`` and ``decoder: transformer`` of Whisper's shape
    (:func:`~asrkit.models.whisper.check_whisper_shape`), a CTC head when ``ctc_weight > 0``,
    the decoder when ``ctc_weight < 1``, the special ids of ``vocabulary`` (a Whisper
    tokenizer's) checked against ``tokenizer_conf.special_tokens``, the prompt's language
    :func:`~asrkit.models.schema.whisper_language`."""
    if (cfg.encoder, cfg.decoder) != ("transformer", "transformer"):
        raise ValueError(f"model: whisper needs encoder: transformer and decoder: transformer, got "
                         f"{cfg.encoder}, {cfg.decoder}")
    check_whisper_shape(cfg.encoder_conf, cfg.decoder_conf)
    mc = cfg.model_conf
    tokens = special_tokens(vocabulary, cfg.tokenizer_conf.special_tokens)
    encoder = _lookup(ENCODERS, "encoder", cfg.encoder)(input_dim, cfg.encoder_conf)
    decoder, ctc = _heads(cfg, vocabulary, mc.ctc_weight, 1.0 - mc.ctc_weight)
    return WhisperAsrModel(vocabulary, encoder, decoder, ctc, cmvn, tokens, ctc_weight=mc.ctc_weight,
                           lsm_weight=mc.lsm_weight, length_normalized_loss=mc.length_normalized_loss,
                           language=whisper_language(cfg.dataset_conf.language_conf.limited_langs))


# name -> builder(cfg, input_dim, vocabulary, cmvn) -> nn.Module.  A model family registers
# one builder here; "asrmodel" is the spelling some WeNet recipes use for the same model.
MODELS: dict[str, Callable[..., nn.Module]] = {"asr_model": build_asr_model, "asrmodel": build_asr_model,
                                               "transducer": build_transducer, "whisper": build_whisper_model}


def build_model(cfg, input_dim: int, vocabulary: Vocabulary, *, load_cmvn_stats: bool = True,
                cmvn_stats: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> nn.Module:
    """Build the model described by ``cfg`` (an ``asrkit.config.TrainConfig``) for
    ``input_dim``-dimensional features and ``vocabulary`` (its size and special ids), with
    the builder ``MODELS[cfg.model]``.

    ``cfg.input_dim`` / ``cfg.output_dim``, when set, must agree with the arguments.
    Set ``load_cmvn_stats=False`` when a checkpoint will supply the CMVN buffers; pass
    ``cmvn_stats`` (``asrkit.config_files.ModelInputs.model_cmvn``) when they were loaded already."""
    if not isinstance(vocabulary, Vocabulary):
        raise TypeError(f"build_model needs an asrkit.text.Vocabulary, got {type(vocabulary).__name__}")
    if cfg.input_dim is not None and cfg.input_dim != input_dim:
        raise ValueError(f"config input_dim {cfg.input_dim} != feature dimension {input_dim}")
    if cfg.output_dim is not None and cfg.output_dim != vocabulary.size:
        raise ValueError(f"config output_dim {cfg.output_dim} != vocabulary size {vocabulary.size}")
    check_cmvn_placement(cfg)
    builder = _lookup(MODELS, "model", cfg.model)
    return builder(cfg, input_dim, vocabulary, build_cmvn(cfg, input_dim, load_cmvn_stats, cmvn_stats))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# config key -> the registry its value names
REGISTRIES: dict[str, dict[str, Any]] = {"encoder": ENCODERS, "decoder": DECODERS, "model": MODELS,
                                         "predictor": PREDICTORS, "joint": JOINTS}


def name_problems(names: dict[str, Any]) -> list[str]:
    """``"<key>: must be one of [...], got ...; did you mean ...?"`` for each ``key: name``
    of ``names`` (config keys of :data:`REGISTRIES`: ``encoder``, ``decoder``, ``model``,
    ``predictor``, ``joint``)
    whose name is not in that key's registry as it is when called (a name registered at
    run time counts); an empty list when every name is.  A value that is not a string is
    left to the type check that reports it."""
    return [f"{key}: {problem}" for key, name in names.items() if isinstance(name, str)
            and (problem := one_of(lambda key=key: REGISTRIES[key])(name))]
