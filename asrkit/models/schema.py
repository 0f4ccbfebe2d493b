"""Top-level config keys owned by ``asrkit.models`` (merged into ``asrkit.config.TrainConfig``).

Key names follow WeNet.  Keys whose default depends on the encoder type (activation,
positional encoding, attention type) default to ``None`` meaning "the encoder's own
default" (conformer: swish / rel_pos / rel_selfattn; transformer: relu / abs_pos / selfattn), as do
``normalize_before``, ``attention_dropout_rate`` and ``cnn_module_kernel`` of ``encoder_conf``
(the squeezeformer's WeNet defaults differ: false, 0.1 and 31, against true, 0.0 and 15).  The keys
of one encoder family each, and which encoder reads which key, are :mod:`asrkit.models.encoder_schema`'s.
``rel_pos`` is WeNet's relative positional encoding; asrkit's Transformer-XL variant is
``rel_pos_xl`` (see ``asrkit.models.embedding``).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, Optional

from asrkit.models.encoder_schema import EncoderVariantKeys, encoder_key_problems, variant_value_problems
from asrkit.models.transducer.schema import JointConf, PredictorConf, predictor_problems
from asrkit.schema import WenetKey, between, checked, non_negative, off, only, optional, positive, same_as
from asrkit.text.whisper import LANGUAGES

# WeNet keys of encoder_conf and decoder_conf that are not fields (wenet/transformer/encoder.py,
# decoder.py): each at the value that is what asrkit always does, or that switches off a WeNet
# feature asrkit lacks.
_COMMON_WENET_KEYS: dict[str, WenetKey] = {
    "concat_after": off(False, feature="concat_after (a linear over the concatenated attention input "
                                       "and output instead of the residual sum)"),
    "use_sdpa": only(False, True, reason="asrkit always uses scaled_dot_product_attention, "
                                         "the same attention as WeNet's either way"),
    "layer_norm_type": only("layer_norm", reason="asrkit's only normalisation layer (no rms_norm)"),
    "norm_eps": only(1e-5, reason="the epsilon of asrkit's LayerNorms"),
    "query_bias": only(True, reason="asrkit's attention projections always have a bias"),
    "value_bias": only(True, reason="asrkit's attention projections always have a bias"),
    "n_kv_head": off(None, feature="grouped-query attention (n_kv_head)"),
    "head_dim": only(None, reason="asrkit's head size is always the model size / attention_heads"),
    "mlp_type": only("position_wise_feed_forward", reason="asrkit's only feed-forward block"),
    "mlp_bias": only(True, reason="asrkit's feed-forward linears always have a bias"),
    "n_expert": only(8, reason="WeNet's default, read only by its mixture-of-experts feed-forward, "
                              "which mlp_type position_wise_feed_forward is not"),
    "n_expert_activated": only(2, reason="WeNet's default, read only by its mixture-of-experts "
                                        "feed-forward, which mlp_type position_wise_feed_forward is not"),
}


@dataclasses.dataclass
class EncoderConf(EncoderVariantKeys):
    """``encoder_conf`` (WeNet names): the keys every encoder shares, and those of one encoder
    family each (:class:`~asrkit.models.encoder_schema.EncoderVariantKeys`)."""

    output_size: int = checked(256, positive)
    attention_heads: int = checked(4, positive)
    linear_units: int = checked(2048, positive)
    # None: the encoder's default (WeNet's: 6; branchformer and e_branchformer 12)
    num_blocks: Optional[int] = checked(None, optional(positive))
    dropout_rate: float = checked(0.1, between(0.0, 1.0))
    positional_dropout_rate: float = checked(0.1, between(0.0, 1.0))
    attention_dropout_rate: Optional[float] = checked(None, optional(between(0.0, 1.0)))  # None: 0 (squeezeformer 0.1)
    # conv1d2: Whisper's two 1-D convolutions, 2x (asrkit.models.subsampling.Conv1dSubsampling2); conv2d2:
    # one 2-D convolution, 2x (efficientConformer only, asrkit.models.efficient_conformer)
    input_layer: Literal["conv2d", "conv2d2", "conv2d6", "conv2d8", "conv1d2"] = "conv2d"
    normalize_before: Optional[bool] = None  # None: true (squeezeformer: false)
    activation_type: Optional[Literal["relu", "swish", "gelu"]] = None
    # rel_pos: WeNet's relative form; rel_pos_xl: Transformer-XL's (asrkit's before
    # config_version 2, see asrkit.config_versions); both need selfattention rel_selfattn.
    # abs_pos_whisper: Whisper's encoder table, added unscaled (asrkit.models.embedding)
    pos_enc_layer_type: Optional[Literal["abs_pos", "rel_pos", "rel_pos_xl", "abs_pos_whisper"]] = None
    key_bias: bool = True  # false: self-attention key projections without bias (Whisper's)
    selfattention_layer_type: Optional[Literal["selfattn", "rel_selfattn"]] = None
    # conformer and efficientConformer only
    macaron_style: bool = True
    use_cnn_module: bool = True
    # odd unless causal (checked when the model is built); None: 15 (squeezeformer: 31)
    cnn_module_kernel: Optional[int] = checked(None, optional(positive))
    cnn_module_norm: Literal["batch_norm", "layer_norm"] = "batch_norm"
    # causal depthwise convolutions (no frame sees later ones; branchformer: the cgMLP's; e_branchformer: the
    # cgMLP's and the merge's)
    causal: bool = False
    # streaming (U2/U2++): the attention context of training and CV (asrkit.models.chunks)
    use_dynamic_chunk: bool = False       # a chunk size drawn per training micro-batch
    use_dynamic_left_chunk: bool = False  # with use_dynamic_chunk: a number of left chunks too
    # > 0: always this chunk (not with dynamic); <= 0: none (WeNet's meaning; its Whisper converter writes -1)
    static_chunk_size: int = 0
    # activation checkpointing of every block while training (either engine: its activations are
    # recomputed in the backward, asrkit.train.engines.activations; WeNet's Whisper converter writes true)
    gradient_checkpointing: bool = False

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        **_COMMON_WENET_KEYS,
        "positionwise_conv_kernel_size": only(1, reason="asrkit's feed-forward is position-wise linear "
                                                        "(WeNet reads this kernel only for conv feed-forwards)"),
        "conv_bias": only(True, reason="asrkit's convolution module always has biases"),
        "conv_norm_eps": only(1e-5, reason="the epsilon of asrkit's convolution-module norm"),
        "conv_inner_factor": only(2, reason="asrkit's convolution module always widens to 2 x channels "
                                            "before its GLU"),
        "final_norm": only(True, reason="asrkit's pre-norm encoders always end with a LayerNorm"),
        "stochastic_depth_rate": off(0.0, feature="stochastic depth"),
    }

    def validate(self) -> list[str]:
        errors = []
        if self.output_size % self.attention_heads:
            errors.append(f"output_size ({self.output_size}) must be divisible by "
                          f"attention_heads ({self.attention_heads})")
        if self.selfattention_layer_type == "rel_selfattn" and self.pos_enc_layer_type in ("abs_pos",
                                                                                           "abs_pos_whisper"):
            errors.append("selfattention_layer_type rel_selfattn needs pos_enc_layer_type rel_pos or rel_pos_xl")
        errors += self._chunk_errors()
        return errors + variant_value_problems(self)

    def _chunk_errors(self) -> list[str]:
        """The streaming keys: the combinations WeNet silently ignores are refused.  (Every
        positional encoding streams: ``rel_pos_xl`` scores depend only on distances, which
        chunks with a cache keep -- ``tests/models/test_encoder_chunk.py``.)"""
        errors = []
        if self.use_dynamic_left_chunk and not self.use_dynamic_chunk:
            errors.append("use_dynamic_left_chunk: true needs use_dynamic_chunk: true "
                          "(WeNet ignores it without; leave it false)")
        if self.static_chunk_size > 0 and self.use_dynamic_chunk:
            errors.append(f"static_chunk_size: {self.static_chunk_size} with use_dynamic_chunk: true "
                          "(WeNet ignores the static chunk then); set one of them")
        return errors


@dataclasses.dataclass
class DecoderConf:
    """``decoder_conf`` (WeNet names).  ``r_num_blocks`` is the depth of the right-to-left
    decoder of ``decoder: bitransformer``.  ``input_layer``: ``embed`` (token embedding ·
    sqrt(d) + sinusoid positions) or ``embed_learnable_pe`` (token embedding + a learned
    448-row table, unscaled: Whisper's decoder).  ``tie_word_embedding``: the output
    projection's weight is the token embedding (one parameter; the projection keeps its
    bias, as WeNet's does).  ``key_bias: false``: the key projection of self-attention has
    no bias, ``src_key_bias: false`` that of source attention (WeNet's two keys, each
    default true; Whisper's attention has neither bias, and WeNet's converter writes both
    false)."""

    attention_heads: int = checked(4, positive)
    linear_units: int = checked(2048, positive)
    num_blocks: int = checked(6, positive)
    r_num_blocks: int = checked(0, non_negative)
    dropout_rate: float = checked(0.1, between(0.0, 1.0))
    positional_dropout_rate: float = checked(0.1, between(0.0, 1.0))
    self_attention_dropout_rate: float = checked(0.0, between(0.0, 1.0))
    src_attention_dropout_rate: float = checked(0.0, between(0.0, 1.0))
    normalize_before: bool = True
    activation_type: Literal["relu", "swish", "gelu"] = "relu"
    input_layer: Literal["embed", "embed_learnable_pe"] = "embed"
    tie_word_embedding: bool = False
    key_bias: bool = True
    src_key_bias: bool = True
    gradient_checkpointing: bool = False  # as encoder_conf's, for the decoder's blocks

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        **_COMMON_WENET_KEYS,
        "use_output_layer": only(True, reason="asrkit's decoders always end with the output projection"),
        "src_attention": only(True, reason="asrkit's decoder layers always attend to the encoder output"),
        "src_query_bias": only(True, reason="asrkit's attention projections always have a bias"),
        "src_value_bias": only(True, reason="asrkit's attention projections always have a bias"),
    }


# WeNet's k2 options of the transducer (wenet/models/transducer/transducer.py): asrkit has no
# k2 path (k2 does not install for asrkit's torch), so only the values that leave it off load.
_K2 = "k2's pruned RNN-T loss (enable_k2; k2 does not install for asrkit's torch)"
_K2_ONLY = ("WeNet's default; it acts only in k2's pruned RNN-T loss (enable_k2: true), which asrkit "
            "does not have, so another value could have no effect")


@dataclasses.dataclass
class ModelConf:
    """``model_conf``: the weights of the loss terms.

    ``model: asr_model``: loss = ctc_weight · CTC + (1 − ctc_weight) · ATT, where with
    ``decoder: bitransformer`` ATT = (1 − reverse_weight) · left-to-right + reverse_weight ·
    right-to-left.  ``model: transducer``: loss = transducer_weight · RNN-T + ctc_weight ·
    CTC + attention_weight · ATT, the three weights summing to 1 (WeNet asserts it);
    ``transducer_weight`` and ``attention_weight`` are keys of the transducer only (``None``:
    not given; WeNet's defaults 1.0 and 0.0), as is asrkit's ``rnnt_type`` (``None``: WeNet's
    ``regular`` lattice; ``modified``: one output per frame, k2's name --
    :mod:`asrkit.models.transducer.loss`).  ``length_normalized_loss`` selects the
    trainer's normaliser (tokens instead of utterances).  (``model: whisper`` reads its
    special ids from ``tokenizer_conf.special_tokens``, where WeNet's converter writes them.)
    """

    ctc_weight: float = checked(0.3, between(0.0, 1.0))
    lsm_weight: float = checked(0.0, between(0.0, 1.0))
    length_normalized_loss: bool = False
    reverse_weight: float = checked(0.0, between(0.0, 1.0))
    transducer_weight: Optional[float] = checked(None, optional(between(0.0, 1.0)))
    attention_weight: Optional[float] = checked(None, optional(between(0.0, 1.0)))
    rnnt_type: Optional[Literal["regular", "modified"]] = None

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "ignore_id": only(-1, reason="asrkit pads targets with -1"),
        "apply_non_blank_embedding": off(False, feature="the non-blank embedding of CTC-aligned frames"),
        "enable_k2": off(False, feature=_K2),
        "delay_penalty": off(0.0, feature="the delay penalty of " + _K2),
        # WeNet's defaults (wenet/transducer/transducer.py), read only in its k2 branch
        "lm_only_scale": only(0.25, reason=_K2_ONLY),
        "am_only_scale": only(0.0, reason=_K2_ONLY),
        "warmup_steps": only(25000.0, reason=_K2_ONLY),
    }


@dataclasses.dataclass
class CtcConf:
    """``ctc_conf``: the CTC blank id, which must be the id of ``<blank>`` in the units file
    (checked when the units are read, before a model is built)."""

    ctc_blank_id: int = checked(0, non_negative)


@dataclasses.dataclass
class CmvnConf:
    """``cmvn_conf``: WeNet JSON global CMVN stats file (``tools/compute_cmvn_stats.py``)."""

    cmvn_file: Optional[str] = None

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        # (null: WeNet's converters write it with cmvn: null and no cmvn_file, where WeNet reads
        # no statistics; with a file, null would mean Kaldi's)
        "is_json_cmvn": only(True, None, reason="asrkit reads WeNet's JSON CMVN statistics (no Kaldi binary "
                                                "stats)",
                             check=lambda value, section: "null with a cmvn_file would be Kaldi statistics "
                                                          "(asrkit reads JSON only): set true"
                             if value is None and section.get("cmvn_file") else None),
    }


def whisper_language(langs: Optional[list]) -> str:
    """The language of ``model: whisper``'s prompt (:class:`asrkit.models.whisper.WhisperAsrModel`)
    for ``langs``, a root config's ``dataset_conf.language_conf.limited_langs``: its one language
    -- WeNet classifies each transcript's language among those (``langid``), so with one
    listed every utterance has it -- or ``en`` without that key (WeNet then classifies
    among ``zh`` and ``en``, which asrkit does not).  ValueError (one line) for several
    languages or one Whisper does not have."""
    if langs is None:
        return "en"
    if len(langs) != 1 or langs[0] not in LANGUAGES:
        raise ValueError(f"dataset_conf.language_conf.limited_langs: {langs}: asrkit gives every utterance one "
                         f"language (WeNet's langid detection per transcript is not implemented); name one of "
                         f"Whisper's languages")
    return langs[0]


@dataclasses.dataclass
class ModelSections:
    """Top-level keys of ``asrkit.models``.

    ``input_dim`` / ``output_dim`` (feature dim, vocabulary size) are written into the
    experiment's ``train.yaml`` by the trainer so that decoding and export can rebuild
    the model without the data; ``build_model`` checks them when set.

    ``encoder``, ``decoder`` and ``model`` name entries of the registries; they are typed
    here and checked against the registries by ``asrkit.models.registry.name_problems``,
    which config loading calls (``asrkit.config.TrainConfig``).
    """

    encoder: str = "conformer"
    encoder_conf: EncoderConf = dataclasses.field(default_factory=EncoderConf)
    decoder: str = "transformer"
    decoder_conf: DecoderConf = dataclasses.field(default_factory=DecoderConf)
    model: str = "asr_model"
    model_conf: ModelConf = dataclasses.field(default_factory=ModelConf)
    ctc_conf: CtcConf = dataclasses.field(default_factory=CtcConf)
    cmvn: Optional[Literal["global_cmvn"]] = None
    cmvn_conf: CmvnConf = dataclasses.field(default_factory=CmvnConf)
    input_dim: Optional[int] = checked(None, lambda v: None if v is None or v > 0 else f"must be > 0, got {v!r}")
    output_dim: Optional[int] = checked(None, lambda v: None if v is None or v > 2 else f"must be > 2, got {v!r}")

    # model: transducer only (asrkit.models.transducer): None when not given
    predictor: Optional[str] = None   # PREDICTORS: rnn | embedding | conv (WeNet's default rnn)
    predictor_conf: Optional[PredictorConf] = None
    joint: Optional[str] = None       # JOINTS: transducer_joint (WeNet's default)
    joint_conf: Optional[JointConf] = None

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "ctc": only("ctc", reason="asrkit's only CTC head"),
        "vocab_size": same_as("output_dim", "WeNet's trainer writes the dictionary size as both"),
    }

    def validate(self) -> list[str]:
        """The keys that belong to one model family: those of ``model: transducer`` are
        required by it (``predictor_conf``, ``joint_conf``; WeNet has no default for either)
        and refused with any other model (WeNet ignores them there, or fails on them);
        ``model: whisper`` needs ``tokenizer: whisper`` and at most one language in
        ``dataset_conf.language_conf.limited_langs`` (the root config's keys, read here when
        ``self`` is the root: :func:`whisper_language`)."""
        errors = encoder_key_problems(self.encoder, self.encoder_conf)
        if self.model == "whisper" and getattr(self, "tokenizer", "whisper") != "whisper":
            errors.append(f"model: whisper needs tokenizer: whisper (Whisper's ids), got {self.tokenizer}")
        if self.model == "whisper" and hasattr(self, "dataset_conf"):
            try:
                whisper_language(self.dataset_conf.language_conf.limited_langs)
            except ValueError as e:
                errors.append(str(e))
        if self.model != "transducer":
            given = {"predictor": self.predictor, "predictor_conf": self.predictor_conf, "joint": self.joint,
                     "joint_conf": self.joint_conf, "model_conf.transducer_weight": self.model_conf.transducer_weight,
                     "model_conf.attention_weight": self.model_conf.attention_weight,
                     "model_conf.rnnt_type": self.model_conf.rnnt_type}
            return errors + [f"{key}: read only by model: transducer (model is {self.model})"
                             for key, value in given.items() if value is not None]
        missing = [key for key in ("predictor_conf", "joint_conf") if getattr(self, key) is None]
        if missing:
            return errors + [f"model: transducer needs a predictor (predictor: rnn | embedding | conv, with its "
                    f"predictor_conf) and a joint (joint_conf); missing: {', '.join(missing)}"]
        errors += predictor_problems(self.predictor or "rnn", self.predictor_conf)
        if self.joint_conf.join_dim is None:
            errors.append("joint_conf.join_dim: required by joint transducer_joint")
        mc = self.model_conf
        transducer = 1.0 if mc.transducer_weight is None else mc.transducer_weight
        attention = 0.0 if mc.attention_weight is None else mc.attention_weight
        if transducer <= 0.0:
            errors.append("model_conf.transducer_weight: must be > 0 for model: transducer (the predictor and "
                          "the joint learn from the RNN-T loss only)")
        if abs(transducer + mc.ctc_weight + attention - 1.0) > 1e-6:
            errors.append(f"model_conf: transducer_weight + ctc_weight + attention_weight must be 1 (WeNet "
                          f"asserts it), got {transducer} + {mc.ctc_weight} + {attention} (defaults when not "
                          f"given: 1.0, asrkit's 0.3 (WeNet's transducer: 0.0), 0.0)")
        return errors
