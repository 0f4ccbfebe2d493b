"""Top-level config keys owned by ``asrkit.models`` (merged into ``asrkit.config.TrainConfig``).

Key names follow WeNet.  Keys whose default depends on the encoder type (activation,
positional encoding, attention type) default to ``None`` meaning "the encoder's own
default" (conformer: swish / rel_pos / rel_selfattn; transformer: relu / abs_pos / selfattn).
``rel_pos`` is WeNet's relative positional encoding; asrkit's Transformer-XL variant is
``rel_pos_xl`` (see ``asrkit.models.embedding``).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar, Literal, Optional

from asrkit.schema import between, checked, non_negative, one_of, positive

# WeNet keys shared by encoder_conf and decoder_conf that asrkit does not implement,
# accepted only at WeNet's defaults.
_COMMON_UNSUPPORTED: dict[str, tuple] = {
    "concat_after": (False,),
    "gradient_checkpointing": (False,),
    "use_sdpa": (False, True),  # asrkit always uses scaled_dot_product_attention
    "layer_norm_type": ("layer_norm",),
    "norm_eps": (1e-5,),
    "query_bias": (True,),
    "key_bias": (True,),
    "value_bias": (True,),
    "n_kv_head": (None,),
    "head_dim": (None,),
    "mlp_type": ("position_wise_feed_forward",),
    "mlp_bias": (True,),
    "n_expert": (8,),
    "n_expert_activated": (2,),
}


@dataclasses.dataclass
class EncoderConf:
    """``encoder_conf`` (WeNet names)."""

    output_size: int = checked(256, positive)
    attention_heads: int = checked(4, positive)
    linear_units: int = checked(2048, positive)
    num_blocks: int = checked(6, positive)
    dropout_rate: float = checked(0.1, between(0.0, 1.0))
    positional_dropout_rate: float = checked(0.1, between(0.0, 1.0))
    attention_dropout_rate: float = checked(0.0, between(0.0, 1.0))
    input_layer: Literal["conv2d", "conv2d6", "conv2d8"] = "conv2d"
    normalize_before: bool = True
    activation_type: Optional[Literal["relu", "swish", "gelu"]] = None
    # rel_pos: WeNet's relative form; rel_pos_xl: Transformer-XL's (asrkit's before
    # config_version 2, see asrkit.models.legacy); both need selfattention rel_selfattn
    pos_enc_layer_type: Optional[Literal["abs_pos", "rel_pos", "rel_pos_xl"]] = None
    selfattention_layer_type: Optional[Literal["selfattn", "rel_selfattn"]] = None
    # conformer only
    macaron_style: bool = True
    use_cnn_module: bool = True
    cnn_module_kernel: int = checked(15, positive)  # must be odd (checked when the model is built)
    cnn_module_norm: Literal["batch_norm", "layer_norm"] = "batch_norm"
    causal: bool = False  # causal depthwise convolution (no frame sees later ones)

    UNSUPPORTED: ClassVar[dict[str, tuple]] = {
        **_COMMON_UNSUPPORTED,
        "use_dynamic_chunk": (False,),
        "use_dynamic_left_chunk": (False,),
        "static_chunk_size": (0,),
        "positionwise_conv_kernel_size": (1,),
        "conv_bias": (True,),
        "conv_norm_eps": (1e-5,),
        "conv_inner_factor": (2,),
        "final_norm": (True,),
        "stochastic_depth_rate": (0.0, 0),
    }

    def validate(self) -> list[str]:
        errors = []
        if self.output_size % self.attention_heads:
            errors.append(f"output_size ({self.output_size}) must be divisible by "
                          f"attention_heads ({self.attention_heads})")
        if self.selfattention_layer_type == "rel_selfattn" and self.pos_enc_layer_type == "abs_pos":
            errors.append("selfattention_layer_type rel_selfattn needs pos_enc_layer_type rel_pos or rel_pos_xl")
        return errors


@dataclasses.dataclass
class DecoderConf:
    """``decoder_conf`` (WeNet names).  ``r_num_blocks`` is the depth of the right-to-left
    decoder of ``decoder: bitransformer``."""

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

    UNSUPPORTED: ClassVar[dict[str, tuple]] = {
        **_COMMON_UNSUPPORTED,
        "input_layer": ("embed",),
        "use_output_layer": (True,),
        "src_attention": (True,),
        "tie_word_embedding": (False,),
        "src_query_bias": (True,),
        "src_key_bias": (True,),
        "src_value_bias": (True,),
    }


@dataclasses.dataclass
class ModelConf:
    """``model_conf``: the hybrid CTC/attention loss.

    loss = ctc_weight · CTC + (1 − ctc_weight) · ATT, where with ``decoder: bitransformer``
    ATT = (1 − reverse_weight) · left-to-right + reverse_weight · right-to-left.
    ``length_normalized_loss`` selects the trainer's normaliser (tokens instead of utterances).
    """

    ctc_weight: float = checked(0.3, between(0.0, 1.0))
    lsm_weight: float = checked(0.0, between(0.0, 1.0))
    length_normalized_loss: bool = False
    reverse_weight: float = checked(0.0, between(0.0, 1.0))

    UNSUPPORTED: ClassVar[dict[str, tuple]] = {
        "ignore_id": (-1,),
        "apply_non_blank_embedding": (False,),
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

    UNSUPPORTED: ClassVar[dict[str, tuple]] = {"is_json_cmvn": (True,)}


def _registered(table: str) -> Callable[[], list[str]]:
    """The names in ``asrkit.models.registry.<table>`` (imported when a config is checked)."""
    def names() -> list[str]:
        from asrkit.models import registry
        return list(getattr(registry, table))
    return names


@dataclasses.dataclass
class ModelSections:
    """Top-level keys of ``asrkit.models``.

    ``input_dim`` / ``output_dim`` (feature dim, vocabulary size) are written into the
    experiment's ``train.yaml`` by the trainer so that decoding and export can rebuild
    the model without the data; ``build_model`` checks them when set.
    """

    encoder: str = checked("conformer", one_of(_registered("ENCODERS")))
    encoder_conf: EncoderConf = dataclasses.field(default_factory=EncoderConf)
    decoder: str = checked("transformer", one_of(_registered("DECODERS")))
    decoder_conf: DecoderConf = dataclasses.field(default_factory=DecoderConf)
    model: str = checked("asr_model", one_of(_registered("MODELS")))
    model_conf: ModelConf = dataclasses.field(default_factory=ModelConf)
    ctc_conf: CtcConf = dataclasses.field(default_factory=CtcConf)
    cmvn: Optional[Literal["global_cmvn"]] = None
    cmvn_conf: CmvnConf = dataclasses.field(default_factory=CmvnConf)
    input_dim: Optional[int] = checked(None, lambda v: None if v is None or v > 0 else f"must be > 0, got {v!r}")
    output_dim: Optional[int] = checked(None, lambda v: None if v is None or v > 2 else f"must be > 2, got {v!r}")

    UNSUPPORTED: ClassVar[dict[str, tuple]] = {"ctc": ("ctc",)}
