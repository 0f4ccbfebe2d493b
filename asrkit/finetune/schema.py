"""Top-level config keys of fine-tuning (merged into ``asrkit.config.TrainConfig``):
frozen modules, LoRA and re-initialised output layers.

The LoRA keys carry WeNet's names and meanings (``wenet/utils/train_utils.py``
``add_lora_args``; WeNet saves ``lora_conf`` in its ``train.yaml``) with real booleans:
``use_lora: false`` is false (WeNet's command line parses its switches with ``type=bool``,
so ``--use_lora False`` is true there).  Each key also has a ``bin/train.py`` flag of the
same name, which sets it (``asrkit.bin.train``)."""
from __future__ import annotations

import dataclasses
from typing import Optional

from asrkit.schema import between, checked, positive


def _names(value) -> Optional[str]:
    bad = [v for v in value if not v or v != v.strip()]
    return f"names must be non-empty, without spaces around them, got {bad!r}" if bad else None


@dataclasses.dataclass
class LoraConf:
    """``lora_conf``: where adapters go and how big they are (WeNet's names and defaults).

    An adapter goes on every linear layer named in ``lora_list`` of every attention module
    named in ``lora_attn_attr`` of every layer of the module lists ``lora_modules``
    (dotted paths: ``encoder.encoders`` is the encoder's blocks, ``decoder.decoders`` the
    attention decoder's): ``y = W x + b + (alpha / rank) · B A x`` with ``A [rank, in]``,
    ``B [out, rank]``.  ``lora_dropout``: dropout on the adapter's input.
    ``lora_ckpt_path``: start the adapters from this checkpoint's (a LoRA run's checkpoint;
    its base weights are not taken).  ``lora_reinit``: start A and B from unit-variance
    Gaussians (WeNet's ``lora_reinit`` with its ``simple``/``unit`` initialisation) and
    subtract ``(alpha / rank) · B A`` from the frozen weight, so the layer's output starts
    where the base model's is (to rounding); off: A as in LoRA's paper, B zero, so the
    output is exactly the base model's."""

    lora_modules: list[str] = checked(default_factory=lambda: ["encoder.encoders"], check=_names)
    lora_attn_attr: list[str] = checked(default_factory=lambda: ["self_attn", "src_attn"], check=_names)
    lora_list: list[str] = checked(default_factory=lambda: ["linear_out", "linear_q", "linear_k", "linear_v"],
                                   check=_names)
    lora_rank: int = checked(8, positive)
    lora_alpha: float = checked(8.0, positive)
    lora_dropout: float = checked(0.0, between(0.0, 0.99))
    lora_ckpt_path: Optional[str] = None
    lora_reinit: bool = False


@dataclasses.dataclass
class FinetuneSections:
    """Fine-tuning keys (``docs/training.md``, "Fine-tuning").

    ``freeze_modules``: parameter-name prefixes (``encoder.``, ``decoder.``,
    ``encoder.encoders.0.``) whose parameters are not trained: no gradient, no optimizer
    state, no all-reduce; BatchNorm layers inside them keep their running statistics
    (``asrkit.finetune.freeze``).  ``use_lora``: put LoRA adapters on the layers
    ``lora_conf`` names; ``only_optimize_lora``: then train the adapters alone (every other
    parameter frozen).  ``reinit_output_layers``: initialise the layers whose size is the
    vocabulary (CTC output, decoder embedding and output, transducer predictor embedding
    and joint output) afresh instead of taking them from ``--enc_init``: what a changed
    units file needs (``asrkit.finetune.vocabulary``)."""

    freeze_modules: list[str] = checked(default_factory=list, check=_names)
    use_lora: bool = False
    only_optimize_lora: bool = False
    lora_conf: LoraConf = dataclasses.field(default_factory=LoraConf)
    reinit_output_layers: bool = False

    def validate(self) -> list[str]:
        problems = []
        if self.only_optimize_lora and not self.use_lora:
            problems.append("only_optimize_lora: true needs use_lora: true (there are no adapters to train)")
        if self.lora_conf.lora_ckpt_path and not self.use_lora:
            problems.append("lora_conf.lora_ckpt_path needs use_lora: true")
        return problems


# the keys that decide which parameters a run trains (and so its optimizer's state)
ADAPTATION_KEYS = ("freeze_modules", "use_lora", "only_optimize_lora", "lora_conf")
_START_ONLY = ("lora_ckpt_path", "lora_reinit")


def adaptation_difference(saved: dict, current: dict) -> str:
    """How the fine-tuning set-up of config dict ``saved`` (a checkpoint's) differs from
    ``current``'s, in words (``""``: the same).  A config saved before these keys existed
    has the defaults."""
    defaults = dataclasses.asdict(FinetuneSections())
    parts = []
    for key in ADAPTATION_KEYS:
        was, now = saved.get(key, defaults[key]), current.get(key, defaults[key])
        if key == "lora_conf":  # (where the adapters started from matters at the start only)
            was, now = ({k: v for k, v in (c or {}).items() if k not in _START_ONLY} for c in (was, now))
        if was != now:
            parts.append(f"{key}: {was!r} (this run: {now!r})")
    return "; ".join(parts)
