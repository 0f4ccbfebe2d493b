"""Building blocks shared by encoders and decoders: activations, the position-wise
feed-forward network and the conformer convolution module."""
from __future__ import annotations

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "swish": nn.SiLU, "gelu": nn.GELU}


def activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose from {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


def conv_padding(kernel_size: int, causal: bool, key: str) -> tuple[int, int]:
    """``(padding, lorder)`` of a depthwise convolution over time: centred (``(kernel − 1) / 2``
    frames each side, no left order; an even kernel is an error naming ``encoder_conf.<key>``) or,
    ``causal``, none (the caller pads the ``lorder = kernel − 1`` frames before)."""
    if causal:
        return 0, kernel_size - 1
    if kernel_size % 2 == 0:
        raise ValueError(f"encoder_conf.{key} must be odd without causal, got {kernel_size}")
    return (kernel_size - 1) // 2, 0


class Dropout(nn.Module):
    """Inverted dropout whose mask costs a quarter of torch's.

    ``nn.Dropout`` draws one random number per element (``bernoulli_``), which on CPU
    costs more than the matrix products around it.  Here one 64-bit draw from torch's
    global generator gives four 16-bit uniforms; an element is zeroed with probability
    ``q = round(p · 65536) / 65536`` (``|q − p| < 8e-6``) and the kept ones are scaled by
    ``1 / (1 − q)``, so the expectation is unchanged.  Deterministic under
    ``torch.manual_seed`` and restored with the RNG state on resume.  Identity in eval
    mode and for ``p = 0``.  Holds no parameters (state dicts are unchanged).
    """

    def __init__(self, p: float = 0.1):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        drops = int(round(p * 65536))
        self.threshold = drops - 32768          # keep int16 draws >= threshold
        self.scale = 65536.0 / (65536 - drops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        n = x.numel()
        words = torch.randint(-9223372036854775807 - 1, 9223372036854775807, ((n + 3) // 4,),
                              dtype=torch.int64, device=x.device)
        keep = words.view(torch.int16)[:n].view(x.shape) >= self.threshold
        return x * (keep * self.scale).to(x.dtype)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class PositionwiseFeedForward(nn.Module):
    """``w2(dropout(act(w1 x)))``: ``d_model -> hidden -> d_model``."""

    def __init__(self, d_model: int, hidden: int, dropout_rate: float, act: str):
        super().__init__()
        self.w_1 = nn.Linear(d_model, hidden)
        self.activation = activation(act)
        self.dropout = Dropout(dropout_rate)
        self.w_2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class ChannelsFirstConvolution(nn.Module):
    """Base of the WeNet-layout convolution modules that run in ``[B, C, T]`` (the Squeezeformer's,
    the Efficient Conformer's): the subclass sets ``pointwise_conv1``, ``depthwise_conv``, ``norm``
    and ``use_layer_norm``."""

    def glu_depthwise_norm(self, x: torch.Tensor) -> torch.Tensor:
        """Pointwise convolution to ``2·C`` and GLU, depthwise convolution, then the LayerNorm
        (over channels) or BatchNorm: ``[B, C, T_in] -> [B, C, T_out]``."""
        x = nn.functional.glu(self.pointwise_conv1(x), dim=1)
        x = self.depthwise_conv(x)
        if self.use_layer_norm:
            return self.norm(x.transpose(1, 2)).transpose(1, 2)
        return self.norm(x)


class ConvolutionModule(nn.Module):
    """Conformer convolution module (Gulati et al. 2020, fig. 2):
    pointwise conv to ``2·d`` channels -> GLU -> depthwise conv (``kernel``) ->
    BatchNorm or LayerNorm -> activation -> pointwise conv.  The depthwise convolution is
    centred (``(kernel − 1) / 2`` frames each side, odd kernels) or, with ``causal``
    (WeNet's ``causal: true``), sees the current frame and the ``kernel − 1`` before it,
    so no frame depends on later ones.  The frames before the utterance are what WeNet
    feeds there: zero *inputs* of the pointwise convolution, i.e. ``GLU(bias)`` after it
    (:meth:`left_context`).

    Padded frames are zeroed before the depthwise convolution and on the output, so a
    frame inside the utterance never sees values from beyond its end.  ``batch_norm``
    uses ``nn.BatchNorm1d`` (convert with ``nn.SyncBatchNorm.convert_sync_batchnorm``
    for synchronised statistics); its training-mode statistics include padded frames.

    :meth:`forward_chunk` runs one chunk of a stream with a cache of the ``kernel − 1``
    module inputs before it (WeNet's ``cnn_cache``); with ``causal`` the chunks together
    equal :meth:`forward` of the whole utterance.
    """

    def __init__(self, channels: int, kernel_size: int, norm: str, act: str, causal: bool = False):
        super().__init__()
        if kernel_size % 2 == 0 and not causal:
            raise ValueError(f"cnn_module_kernel must be odd, got {kernel_size}")
        if norm not in ("batch_norm", "layer_norm"):
            raise ValueError(f"cnn_module_norm must be batch_norm or layer_norm, got {norm!r}")
        self.channels = channels
        self.causal = causal
        # frames of zero padding (left, right) of the depthwise convolution
        self.padding = (kernel_size - 1, 0) if causal else ((kernel_size - 1) // 2, (kernel_size - 1) // 2)
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, 1)
        self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, padding=0 if causal else self.padding[0],
                                        groups=channels)
        self.use_layer_norm = norm == "layer_norm"
        self.norm = nn.LayerNorm(channels) if self.use_layer_norm else nn.BatchNorm1d(channels)
        self.activation = activation(act)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, 1)

    def left_context(self, batch: int, frames: int) -> torch.Tensor:
        """``[batch, C, frames, 1]``: the depthwise input of the frames before an
        utterance, ``GLU(pointwise_conv1.bias)`` (a zero input frame after the pointwise
        convolution), as WeNet's causal convolution computes them."""
        bias = self.pointwise_conv1.bias
        assert bias is not None
        return nn.functional.glu(bias, dim=-1).view(1, -1, 1, 1).expand(batch, -1, frames, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``x [B, T, C]``, ``mask [B, 1, T]`` bool valid frames -> ``[B, T, C]``.

        Computed in the ``[B, T, C]`` layout: the pointwise convolutions are ``F.linear``
        with the Conv1d weights (parameters and state dicts unchanged), and the depthwise
        convolution runs as a channels-last ``conv2d`` over ``[B, C, T, 1]`` -- the same
        memory as ``[B, T, C]``, so no transposed copies (30 % faster on CPU than
        ``[B, C, T]`` Conv1d with the two LayerNorm transposes)."""
        valid = mask.transpose(1, 2)  # [B, T, 1]
        x = nn.functional.linear(x, self.pointwise_conv1.weight.squeeze(-1), self.pointwise_conv1.bias)
        x = nn.functional.glu(x, dim=-1).masked_fill(~valid, 0.0)
        weight = self.depthwise_conv.weight.unsqueeze(-1).contiguous(memory_format=torch.channels_last)
        x = x.transpose(1, 2).unsqueeze(-1)  # [B, C, T, 1]
        left, right = self.padding
        if left != right:  # causal: the frames before the utterance on the left, nothing on the right
            x = torch.cat([self.left_context(x.size(0), left).to(x.dtype), x], dim=2)
            right = 0
        x = nn.functional.conv2d(x.contiguous(memory_format=torch.channels_last), weight,
                                 self.depthwise_conv.bias, padding=(right, 0), groups=self.channels)
        return self.after_depthwise(x.squeeze(-1)).masked_fill(~valid, 0.0)

    def after_depthwise(self, x: torch.Tensor) -> torch.Tensor:
        """Norm, activation and the second pointwise convolution: ``[B, C, T] -> [B, T, C]``."""
        if self.use_layer_norm:
            x = self.norm(x.transpose(1, 2))
        else:
            x = self.norm(x).transpose(1, 2)
        return nn.functional.linear(self.activation(x), self.pointwise_conv2.weight.squeeze(-1),
                                    self.pointwise_conv2.bias)

    def forward_chunk(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk ``x [1, T, C]`` of a stream -> ``(out [1, T, C], new_cache)``.

        Causal: ``cache [1, C, kernel − 1]`` holds the module *inputs* of the
        ``kernel − 1`` frames before the chunk (WeNet's ``cnn_cache``); an empty tensor
        (any dimension 0) means the utterance starts here and equals a cache of zeros, the
        frames before an utterance in WeNet's formulation (:meth:`left_context`).
        ``new_cache [1, C, kernel − 1]`` holds the inputs of the last ``kernel − 1`` frames
        of ``cat(cache, x)``.  Every frame sees exactly what :meth:`forward` shows it.  ``N``
        streams' chunks at once: ``x [N, T, C]``, ``cache [N, C, kernel − 1]``.

        Centred (not causal): the chunk is convolved alone, zero-padded at both edges, and
        ``new_cache`` is empty (``[1, C, 0]``): equal to :meth:`forward` only when the chunk
        is the whole utterance (as in WeNet, a centred convolution does not stream)."""
        if not self.causal:
            valid = torch.ones(1, 1, x.size(1), dtype=torch.bool, device=x.device)
            return self.forward(x, valid), x.new_zeros([x.size(0), self.channels, 0])
        left = self.padding[0]
        if cache.size(0) == 0 or cache.size(1) == 0 or cache.size(2) == 0:
            cache = x.new_zeros([x.size(0), self.channels, left])
        x = torch.cat([cache.transpose(1, 2).to(x.dtype), x], dim=1)  # [1, left + T, C]
        new_cache = x[:, x.size(1) - left:].transpose(1, 2)
        x = nn.functional.linear(x, self.pointwise_conv1.weight.squeeze(-1), self.pointwise_conv1.bias)
        x = nn.functional.glu(x, dim=-1)
        weight = self.depthwise_conv.weight.unsqueeze(-1).contiguous(memory_format=torch.channels_last)
        x = x.transpose(1, 2).unsqueeze(-1).contiguous(memory_format=torch.channels_last)  # [1, C, left + T, 1]
        x = nn.functional.conv2d(x, weight, self.depthwise_conv.bias, groups=self.channels)
        return self.after_depthwise(x.squeeze(-1)), new_cache
