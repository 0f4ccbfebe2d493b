"""The ``encoder_conf`` keys of one encoder family each (branchformer, e_branchformer,
squeezeformer, efficientConformer), and the table of which encoder reads which key.

:class:`EncoderVariantKeys` holds those keys; :class:`asrkit.models.schema.EncoderConf` (the
``encoder_conf`` section) extends it with the keys every encoder shares.  Given at a value other
than its default under an encoder that does not read it, a key is refused
(:func:`encoder_key_problems`), as WeNet's constructors fail on keys they do not take.  This
module imports no other schema module of ``asrkit.models`` (no cycle: ``schema.py`` imports it).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal, Optional, Union

from asrkit.schema import between, checked, optional, positive


@dataclasses.dataclass
class EfficientConf:
    """``encoder_conf.efficient_conf`` of ``encoder: efficientConformer``: WeNet's recipes write
    the Efficient Conformer's own keys in this sub-mapping, and WeNet's ``init_model`` passes
    them to the encoder with the rest of ``encoder_conf``; each may also sit directly in
    ``encoder_conf`` (not both: WeNet's constructor then fails with "multiple values").  ``None``:
    not given here.  Meanings and defaults: :class:`EncoderVariantKeys`."""

    stride_layer_idx: Optional[Union[int, list[int]]] = None
    stride: Optional[Union[int, list[int]]] = None
    group_layer_idx: Optional[Union[int, list[int]]] = None
    group_size: Optional[int] = checked(None, optional(positive))
    stride_kernel: Optional[bool] = None


# WeNet's defaults of the Efficient Conformer's own keys (wenet/efficient_conformer/encoder.py)
EFFICIENT_DEFAULTS: dict[str, Any] = {"stride_layer_idx": 3, "stride": 2, "group_layer_idx": [0, 1, 2, 3],
                                      "group_size": 3, "stride_kernel": True}


@dataclasses.dataclass
class EncoderVariantKeys:
    """The keys of one encoder family (WeNet's names, defaults and meanings)."""

    # branchformer (asrkit.models.branchformer; the cgmlp_* keys, use_linear_after_conv and gate_activation
    # are e_branchformer's too)
    use_attn: bool = True    # the self-attention branch
    use_cgmlp: bool = True   # the cgMLP branch
    cgmlp_linear_units: int = checked(2048, positive)  # the cgMLP's hidden size (even: split in two halves)
    cgmlp_conv_kernel: int = checked(31, positive)     # its depthwise convolution (odd unless causal)
    use_linear_after_conv: bool = False                # a linear after that convolution
    gate_activation: Literal["identity", "hardtanh", "tanh", "relu", "selu", "swish", "gelu"] = "identity"
    merge_method: Literal["concat", "learned_ave", "fixed_ave"] = "concat"
    # fixed_ave: the cgMLP branch's weight (the attention's is 1 - it); one, or one per block
    cgmlp_weight: Union[float, list[float]] = 0.5
    # learned_ave: the probability of dropping the attention branch in training; one, or one per block
    attn_branch_drop_rate: Union[float, list[float]] = 0.0
    # e_branchformer (asrkit.models.e_branchformer): the depthwise convolution of its merge (odd unless
    # causal), and its feed-forwards (false: none, whatever macaron_style says)
    merge_conv_kernel: int = checked(3, positive)
    use_ffn: bool = True
    # squeezeformer (asrkit.models.squeezeformer): the blocks' width (output_size: after a final projection
    # when it differs), the blocks before which the frame rate halves (an int, a list or null) and doubles
    # back, the reduction layer, the FFNs' width factor, a depthwise second subsampling convolution, dropouts
    # (input projection, FFN inside, each residual), WeNet's shift of the position scores, the convolution
    # module's norm, adaptive scales, WeNet's uniform initialisation
    encoder_dim: int = checked(256, positive)
    reduce_idx: Optional[Union[int, list[int]]] = 5
    recover_idx: Optional[Union[int, list[int]]] = 11
    time_reduction_layer_type: Literal["conv1d", "stream", "conv2d"] = "conv1d"
    feed_forward_expansion_factor: int = checked(4, positive)
    dw_stride: bool = False
    input_dropout_rate: float = checked(0.1, between(0.0, 1.0))
    feed_forward_dropout_rate: float = checked(0.1, between(0.0, 1.0))
    dropout: float = checked(0.1, between(0.0, 1.0))
    do_rel_shift: bool = True
    cnn_norm_type: Literal["batch_norm", "layer_norm"] = "batch_norm"
    adaptive_scale: bool = True
    init_weights: bool = True
    # efficientConformer (asrkit.models.efficient_conformer; None: not given -- WeNet's default, or
    # efficient_conf's value): the blocks whose convolution module strides (an int or an ascending list;
    # WeNet's default 3), each one's stride (2), the blocks with grouped attention ([0, 1, 2, 3]), the
    # group size (3), and whether the convolution kernel is divided by each stride after it (true)
    stride_layer_idx: Optional[Union[int, list[int]]] = None
    stride: Optional[Union[int, list[int]]] = None
    group_layer_idx: Optional[Union[int, list[int]]] = None
    group_size: Optional[int] = checked(None, optional(positive))
    stride_kernel: Optional[bool] = None
    efficient_conf: Optional[EfficientConf] = None  # the same five keys, as WeNet's recipes write them


def variant_value_problems(conf: EncoderVariantKeys) -> list[str]:
    """The values of the keys above that no encoder takes (one message each)."""
    problems = []
    for key in ("cgmlp_weight", "attn_branch_drop_rate"):
        values = getattr(conf, key)
        values = values if isinstance(values, list) else [values]
        if any(not 0.0 <= v <= 1.0 for v in values):
            problems.append(f"{key}: must be in [0, 1], got {getattr(conf, key)!r}")
    return problems


# encoder_conf keys read by some encoders only (WeNet's constructors take no others, and fail on
# them): key -> the encoders that read it.  The conformer's keys are not listed for the transformer
# (asrkit has always accepted them there, unread).
_EFFICIENT = "efficientConformer"
_CONFORMERS = ("transformer", "conformer", _EFFICIENT)
ENCODER_KEY_READERS: dict[str, tuple[str, ...]] = {
    **{key: ("branchformer",) for key in ("use_attn", "use_cgmlp", "merge_method", "cgmlp_weight",
                                          "attn_branch_drop_rate")},
    **{key: ("branchformer", "e_branchformer") for key in ("cgmlp_linear_units", "cgmlp_conv_kernel",
                                                            "use_linear_after_conv", "gate_activation")},
    **{key: ("e_branchformer",) for key in ("merge_conv_kernel", "use_ffn")},
    **{key: (*_CONFORMERS, "e_branchformer") for key in ("linear_units", "macaron_style")},
    "activation_type": (*_CONFORMERS, "e_branchformer", "squeezeformer"),
    **{key: _CONFORMERS for key in ("use_cnn_module", "cnn_module_norm")},
    **{key: (*_CONFORMERS, "squeezeformer") for key in ("normalize_before", "cnn_module_kernel")},
    **{key: (*_CONFORMERS, "branchformer", "e_branchformer") for key in ("dropout_rate", "positional_dropout_rate",
                                                                         "input_layer")},
    **{key: ("transformer", "conformer", "branchformer", "e_branchformer") for key in ("key_bias",
                                                                                    "selfattention_layer_type")},
    **{key: ("squeezeformer",) for key in ("encoder_dim", "reduce_idx", "recover_idx", "time_reduction_layer_type",
                                           "feed_forward_expansion_factor", "dw_stride", "input_dropout_rate",
                                           "feed_forward_dropout_rate", "dropout", "do_rel_shift", "cnn_norm_type",
                                           "adaptive_scale", "init_weights")},
    **{key: (_EFFICIENT,) for key in (*EFFICIENT_DEFAULTS, "efficient_conf")},
}
# encoders that take WeNet's relative positions only (WeNet's others fail inside them, or asrkit does
# not build their attention with another encoding)
_REL_POS_ONLY = {"squeezeformer": "WeNet's squeezeformer fails with its plain attention",
                 _EFFICIENT: "asrkit builds its relative and grouped attentions only"}


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def encoder_key_problems(encoder: str, conf: Any) -> list[str]:
    """One message per key of ``conf`` (``encoder_conf``) given at a value other than its
    default that ``encoder`` does not read (:data:`ENCODER_KEY_READERS`), and per value that
    ``encoder`` refuses whatever the others do; none for an encoder the table does not name (one
    registered at run time reads what it likes)."""
    if not any(encoder in readers for readers in ENCODER_KEY_READERS.values()):
        return []
    defaults = {f.name: _default(f) for f in dataclasses.fields(conf)}
    problems = []
    if encoder in _REL_POS_ONLY and conf.pos_enc_layer_type not in (None, "rel_pos"):
        problems.append(f"encoder_conf.pos_enc_layer_type: {conf.pos_enc_layer_type!r}: encoder {encoder} takes "
                        f"rel_pos only ({_REL_POS_ONLY[encoder]})")
    if encoder != _EFFICIENT and conf.input_layer == "conv2d2":
        problems.append(f"encoder_conf.input_layer: 'conv2d2' is implemented for encoder {_EFFICIENT} only (WeNet's "
                        f"length rule for it, kept there, is not the other encoders')")
    if encoder == _EFFICIENT and conf.efficient_conf is not None:
        for key in EFFICIENT_DEFAULTS:
            if getattr(conf, key) is not None and getattr(conf.efficient_conf, key) is not None:
                problems.append(f"encoder_conf.{key}: given both in encoder_conf and in encoder_conf.efficient_conf "
                                f"(WeNet's constructor fails: multiple values for {key}); keep one")
    for key, readers in ENCODER_KEY_READERS.items():
        value = getattr(conf, key)
        if encoder not in readers and value != defaults[key]:
            problems.append(f"encoder_conf.{key}: {value!r} is read only by encoder {' / '.join(readers)} "
                            f"(encoder is {encoder}; WeNet's {encoder} takes no such key)")
    return problems
