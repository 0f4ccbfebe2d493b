"""LoRA (low-rank adaptation, Hu et al. 2021) on a model's linear layers, as WeNet places
it (``wenet/finetune/lora``): :func:`inject_lora` replaces the named ``nn.Linear`` layers by
:class:`LoraLinear`, which keeps the layer's own ``weight`` and ``bias`` (same names, same
tensors) and adds ``lora_A [rank, in]`` and ``lora_B [out, rank]``:

    y = W x + b + s · B (A x),   s = lora_alpha / lora_rank

:func:`merge_lora_state` folds the adapters into the weights of a state dict
(``W + s · B A``) and drops them: the plain model's state, which decodes, averages and
exports like any other.  Where the adapters sit is recorded in the checkpoint
(:func:`lora_record`), so merging needs no config.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

ADAPTER_SUFFIXES = (".lora_A", ".lora_B")
# the checkpoint entry naming the adapters and their scales (lora_record)
LORA_RECORD = "lora"


class LoraLinear(nn.Module):
    """``base`` (an ``nn.Linear``, whose ``weight`` and ``bias`` Parameters it takes over)
    plus a rank-``rank`` adapter scaled by ``alpha / rank``, with dropout ``dropout`` on
    the adapter's input.  ``reinit`` False: ``lora_A`` Kaiming-uniform (LoRA's), ``lora_B``
    zero -- the output equals ``base``'s exactly; True: both unit-variance Gaussians
    (``1 / sqrt(fan)``) and ``s · B A`` subtracted from ``weight``, so the output equals
    the base's to rounding (WeNet's ``lora_reinit``, mode ``simple``, ``unit``)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float = 0.0, *,
                 reinit: bool = False, generator: torch.Generator | None = None):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.rank, self.scaling = int(rank), float(alpha) / int(rank)
        like = dict(device=base.weight.device, dtype=base.weight.dtype)
        self.lora_A = nn.Parameter(torch.empty(rank, self.in_features, **like))
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, **like))
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        with torch.no_grad():
            if reinit:
                self.lora_A.normal_(0.0, 1.0 / math.sqrt(self.in_features), generator=generator)
                self.lora_B.normal_(0.0, 1.0 / math.sqrt(self.out_features), generator=generator)
                self.weight -= self.delta().to(self.weight.dtype)
            else:
                nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5), generator=generator)

    def delta(self) -> torch.Tensor:
        """``s · B A``: what the adapter adds to ``weight``."""
        return (self.lora_B @ self.lora_A) * self.scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight, self.bias)
        return out + F.linear(F.linear(self.lora_dropout(x), self.lora_A), self.lora_B) * self.scaling

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, " \
               f"scaling={self.scaling:g}"


class LoraPlacementError(ValueError):
    """``lora_conf`` names a module path that is not in the model, or places no adapter."""


def lora_targets(model: nn.Module, modules: Sequence[str], attn_attrs: Sequence[str],
                 linears: Sequence[str]) -> list[str]:
    """The dotted names of the ``nn.Linear`` layers WeNet's placement reaches: for each
    path of ``modules`` (a list of layers, e.g. ``encoder.encoders``), each layer's
    attribute of ``attn_attrs`` it has, and that module's linear of ``linears`` it has.
    :class:`LoraPlacementError` for a path the model lacks or a placement that reaches none."""
    names = []
    for path in modules:
        try:
            layers = model.get_submodule(path)
        except AttributeError:
            raise LoraPlacementError(f"lora_conf.lora_modules: the model has no module '{path}'") from None
        if not isinstance(layers, (nn.ModuleList, nn.Sequential)):
            raise LoraPlacementError(f"lora_conf.lora_modules: '{path}' is a {type(layers).__name__}, not a list "
                                     f"of layers (e.g. encoder.encoders, decoder.decoders)")
        for i, layer in enumerate(layers):
            for attr in attn_attrs:
                attn = getattr(layer, attr, None)
                if attn is None:
                    continue
                for lin in linears:
                    if isinstance(getattr(attn, lin, None), (nn.Linear, LoraLinear)):
                        names.append(f"{path}.{i}.{attr}.{lin}")
    if not names:
        raise LoraPlacementError(f"lora_conf places no adapter: no layer of {list(modules)} has an attention "
                                 f"{list(attn_attrs)} with a linear {list(linears)}")
    return names


def inject_lora(model: nn.Module, conf, *, seed: int) -> list[str]:
    """Replace the linears :func:`lora_targets` finds for ``conf`` (``lora_conf``) by
    :class:`LoraLinear`; their random initialisation is drawn from ``seed`` alone (the
    same adapters on every rank and in every run).  Returns the layers' names."""
    names = lora_targets(model, conf.lora_modules, conf.lora_attn_attr, conf.lora_list)
    generator = torch.Generator().manual_seed(seed)
    for name in names:
        parent_name, attr = name.rsplit(".", 1)
        parent = model.get_submodule(parent_name)
        base = getattr(parent, attr)
        if isinstance(base, LoraLinear):
            continue
        setattr(parent, attr, LoraLinear(base, conf.lora_rank, conf.lora_alpha, conf.lora_dropout,
                                         reinit=conf.lora_reinit, generator=generator))
    return names


def has_lora(model: nn.Module) -> bool:
    return any(isinstance(m, LoraLinear) for m in model.modules())


def lora_record(model: nn.Module) -> dict:
    """The checkpoint's :data:`LORA_RECORD`: ``{"scalings": {layer name: s}}``, where the
    adapters are and how much they count (names relative to ``model``)."""
    return {"scalings": {name: m.scaling for name, m in model.named_modules() if isinstance(m, LoraLinear)}}


def is_adapter(name: str) -> bool:
    return name.endswith(ADAPTER_SUFFIXES)


def merge_lora_state(state: dict, record: dict) -> dict:
    """``state`` with each adapter of ``record`` (:func:`lora_record`) folded into its
    layer's weight -- ``W + s · B A``, computed in float32 or wider and stored in ``W``'s
    dtype -- and the ``lora_A``/``lora_B`` entries dropped.  ``ValueError`` when an adapter
    of the record is missing from ``state``."""
    out = {k: v for k, v in state.items() if not is_adapter(k)}
    for layer, scaling in record["scalings"].items():
        try:
            a, b, w = state[f"{layer}.lora_A"], state[f"{layer}.lora_B"], state[f"{layer}.weight"]
        except KeyError as e:
            raise ValueError(f"the LoRA record names layer '{layer}' but the state has no {e}") from None
        wide = torch.promote_types(w.dtype, torch.float32)
        out[f"{layer}.weight"] = (w.to(wide) + (b.to(wide) @ a.to(wide)) * scaling).to(w.dtype)
    return out
