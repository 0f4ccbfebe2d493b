"""Config sections of the transducer (``model: transducer``): ``predictor_conf`` and
``joint_conf``, WeNet's names and defaults (``wenet/models/transducer/predictor.py``,
``joint.py`` at commit 01546996), and the per-kind check of ``predictor_conf``.

WeNet passes ``predictor_conf`` as keyword arguments to the predictor class that
``predictor`` names, so which keys exist and what they default to depends on that kind
(:data:`PREDICTOR_PARAMS`).  Here every key of :class:`PredictorConf` is optional (``None``:
not given) and :func:`predictor_problems` applies the kind's table: a key the kind requires
and lacks, or a key the kind does not take (WeNet: ``TypeError: unexpected keyword``), is
an error at load.  ``asrkit.models.registry.build_predictor`` builds the kind with the given
keys and the table's defaults for the others.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, Optional

from asrkit.schema import (REQUIRED, WenetKey, any_value, checked, kind_key_problems, non_negative, off,
                           optional, positive)

# WeNet's WENET_ACTIVATION_CLASSES (wenet/utils/class_utils.py)
Activation = Literal["hardtanh", "tanh", "relu", "selu", "swish", "gelu"]


def _rate_or_none(value) -> Optional[str]:
    return None if value is None or 0.0 <= value < 1.0 else f"must be in [0, 1), got {value!r}"


@dataclasses.dataclass
class PredictorConf:
    """``predictor_conf`` (WeNet names).  ``None`` means "not given": the kind's default
    from :data:`PREDICTOR_PARAMS` applies, or the key is required by that kind."""

    embed_size: Optional[int] = checked(None, optional(positive))
    output_size: Optional[int] = checked(None, optional(positive))
    embed_dropout: Optional[float] = checked(None, _rate_or_none)
    # rnn
    hidden_size: Optional[int] = checked(None, optional(positive))
    num_layers: Optional[int] = checked(None, optional(positive))
    rnn_type: Optional[Literal["lstm", "gru", "rnn"]] = None
    dropout: Optional[float] = checked(None, _rate_or_none)   # between stacked RNN layers (torch's)
    bias: Optional[bool] = None
    # embedding (stateless) and conv
    n_head: Optional[int] = checked(None, optional(positive))  # embedding only
    history_size: Optional[int] = checked(None, optional(non_negative))
    activation: Optional[Activation] = None
    layer_norm_epsilon: Optional[float] = checked(None, optional(positive))


# kind -> {key: WeNet's default, or REQUIRED (WeNet's constructor has no default)}
PREDICTOR_PARAMS: dict[str, dict[str, Any]] = {
    "rnn": {"embed_size": REQUIRED, "output_size": REQUIRED, "embed_dropout": REQUIRED,
            "hidden_size": REQUIRED, "num_layers": REQUIRED, "bias": True, "rnn_type": "lstm",
            "dropout": 0.1},
    "embedding": {"embed_size": REQUIRED, "output_size": REQUIRED, "embed_dropout": REQUIRED,
                  "n_head": REQUIRED, "history_size": 2, "activation": "swish", "bias": False,
                  "layer_norm_epsilon": 1e-5},
    "conv": {"embed_size": REQUIRED, "output_size": REQUIRED, "embed_dropout": REQUIRED,
             "history_size": 2, "activation": "relu", "bias": False, "layer_norm_epsilon": 1e-5},
}


def predictor_problems(kind: str, conf: PredictorConf) -> list[str]:
    """What is wrong with ``predictor_conf`` for predictor ``kind`` (one message per key;
    an empty list when it is complete).  An unknown ``kind`` is reported by the registry."""
    params = PREDICTOR_PARAMS.get(kind)
    if params is None:
        return []
    problems = kind_key_problems("predictor_conf", "predictor", kind, conf, params)
    if kind in ("embedding", "conv") and None not in (conf.embed_size, conf.output_size) \
            and conf.embed_size != conf.output_size:
        problems.append(f"predictor_conf.output_size ({conf.output_size}) must equal embed_size "
                        f"({conf.embed_size}) for predictor {kind}")
    return problems


@dataclasses.dataclass
class JointConf:
    """``joint_conf`` of ``joint: transducer_joint`` (WeNet names and defaults).

    ``enc_output_size`` / ``pred_output_size``: WeNet requires them; here they may be left
    out and are then the encoder's and the predictor's output sizes (when given they must
    equal those).  ``join_dim`` is required.  Without ``prejoin_linear`` and
    ``postjoin_linear`` all three sizes must be equal (WeNet asserts it)."""

    enc_output_size: Optional[int] = checked(None, optional(positive))
    pred_output_size: Optional[int] = checked(None, optional(positive))
    join_dim: Optional[int] = checked(None, optional(positive))
    prejoin_linear: bool = True
    postjoin_linear: bool = False
    joint_mode: Literal["add"] = "add"   # WeNet's only mode (it asserts it)
    activation: Activation = "tanh"

    WENET_KEYS: ClassVar[dict[str, WenetKey]] = {
        "hat_joint": off(False, feature="the HAT joint (hat_joint: a separate blank distribution)"),
        "dropout_rate": any_value(float, "read by WeNet only for the HAT joint (hat_joint: true), "
                                         "which asrkit refuses"),
        "hat_activation": any_value(str, "read by WeNet only for the HAT joint (hat_joint: true), "
                                         "which asrkit refuses"),
    }

    def validate(self) -> list[str]:
        sizes = (self.enc_output_size, self.pred_output_size, self.join_dim)
        if not self.prejoin_linear and not self.postjoin_linear and None not in sizes \
                and len(set(sizes)) > 1:
            return [f"enc_output_size, pred_output_size and join_dim must be equal without "
                    f"prejoin_linear and postjoin_linear, got {sizes}"]
        return []
