"""Transducer predictors (WeNet's ``predictor`` kinds ``rnn``, ``embedding``, ``conv``), with
WeNet's parameter names so that its checkpoints load as they are.

A predictor maps the tokens emitted so far to one vector per position.  Every kind has the
same interface (WeNet's ``PredictorBase``), which training and the searches use:

* ``forward(input [B, U], cache=None) -> [B, U, P]``: the whole sequence at once (training,
  scoring).  ``cache`` is a state from :meth:`init_state` (the default) or a previous step.
* ``init_state(batch_size, device) -> List[Tensor]``: the state before any token.
* ``forward_step(input [B, 1], padding [B, 1], cache) -> (out [B, 1, P], new_cache)``: one
  token per row.  A row whose ``padding`` is 1 keeps its old state in ``new_cache`` (its
  ``out`` is computed all the same and is to be ignored); 0 advances it.  Feeding a sequence
  step by step from :meth:`init_state` with padding 0 gives :meth:`forward`'s output.
* ``batch_to_cache(cache) -> List[List[Tensor]]``: the batch state split per row (each row
  keeps a batch dimension of 1); ``cache_to_batch`` joins such rows back into a batch.
* ``output_size() -> int``: P.

Training feeds ``[<blank>] + tokens`` (WeNet's ``add_blank``: the predictor starts from
``<blank>``, not ``<sos>``), padding replaced by ``<blank>``.

Where asrkit differs from WeNet (at commit 01546996), on purpose:

* ``forward_step`` of the stateless kinds (``embedding``, ``conv``) honours ``padding``; WeNet
  ignores it there (a TODO in its code).  WeNet's searches pass padding 0, so their results
  are the same.
* ``rnn_type: gru`` / ``rnn`` keep one state tensor (``[h]``); WeNet hands these torch modules
  the LSTM's ``(h, c)`` pair and fails.  ``rnn_type: lstm`` keeps ``[h, c]`` as WeNet does.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import nn

from asrkit.models.layers import Dropout

# WeNet's WENET_ACTIVATION_CLASSES (swish is torch's SiLU)
ACTIVATIONS: dict[str, type[nn.Module]] = {"hardtanh": nn.Hardtanh, "tanh": nn.Tanh, "relu": nn.ReLU,
                                           "selu": nn.SELU, "swish": nn.SiLU, "gelu": nn.GELU}
RNNS: dict[str, type[nn.Module]] = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}


def _keep(padding: torch.Tensor) -> torch.Tensor:
    """``padding [B, 1]`` (1 = keep the old state) as a bool ``[B]``."""
    return padding.reshape(-1).to(torch.bool)


class Predictor(nn.Module):
    """The interface of every predictor (see the module docstring)."""
    # the layers sized by the vocabulary (asrkit.finetune.vocabulary re-initialises them)
    VOCABULARY_LAYERS = ("embed",)

    @torch.jit.export
    def output_size(self) -> int:
        raise NotImplementedError

    @torch.jit.export
    def init_state(self, batch_size: int, device: torch.device) -> List[torch.Tensor]:
        raise NotImplementedError

    @torch.jit.export
    def forward_step(self, input: torch.Tensor, padding: torch.Tensor, cache: List[torch.Tensor]
                     ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        raise NotImplementedError

    @torch.jit.export
    def batch_to_cache(self, cache: List[torch.Tensor]) -> List[List[torch.Tensor]]:
        raise NotImplementedError

    @torch.jit.export
    def cache_to_batch(self, cache: List[List[torch.Tensor]]) -> List[torch.Tensor]:
        raise NotImplementedError


class RNNPredictor(Predictor):
    """WeNet's ``rnn`` predictor: ``projection(rnn(dropout(embed(tokens))))``.

    State: ``[h, c]`` for an LSTM, ``[h]`` for a GRU or plain RNN, each
    ``[num_layers, B, hidden_size]``, zeros at the start."""

    __constants__ = ["is_lstm"]  # (for TorchScript: only the branch of this kind is compiled)

    def __init__(self, vocab_size: int, embed_size: int, output_size: int, embed_dropout: float,
                 hidden_size: int, num_layers: int, bias: bool = True, rnn_type: str = "lstm",
                 dropout: float = 0.1):
        super().__init__()
        if rnn_type not in RNNS:
            raise ValueError(f"rnn_type must be one of {sorted(RNNS)}, got {rnn_type!r}")
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.is_lstm = rnn_type == "lstm"
        self._output_size = output_size
        self.embed = nn.Embedding(vocab_size, embed_size)
        self.dropout = Dropout(embed_dropout)
        # torch applies `dropout` between stacked layers only: with one layer it is a no-op
        # (and torch warns), so it is passed as 0 there -- the same computation.
        self.rnn = RNNS[rnn_type](input_size=embed_size, hidden_size=hidden_size, num_layers=num_layers,
                                  bias=bias, batch_first=True, dropout=dropout if num_layers > 1 else 0.0)
        self.projection = nn.Linear(hidden_size, output_size)

    @torch.jit.export
    def output_size(self) -> int:
        return self._output_size

    @torch.jit.export
    def init_state(self, batch_size: int, device: torch.device) -> List[torch.Tensor]:
        zeros = torch.zeros(self.num_layers, batch_size, self.hidden_size, device=device,
                            dtype=self.embed.weight.dtype)
        return [zeros, zeros.clone()] if self.is_lstm else [zeros]

    def _run(self, embed: torch.Tensor, cache: List[torch.Tensor]) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        if not torch.jit.is_scripting():
            if embed.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
                # The recurrence in fp32 under CPU autocast (bf16 ``dtype``): CPU autocast sends
                # the RNN to oneDNN's bf16 kernel, which exists only on CPUs with native bf16
                # (elsewhere it fails to build its primitive).  The predictor is a small share
                # of the model's compute, so fp32 costs little and gives the same result on
                # every CPU; the embedding and projection still run under autocast.  (CUDA
                # autocast runs cuDNN's half-precision RNN, as WeNet does, and is left alone.)
                with torch.autocast("cpu", enabled=False):
                    return self._run_rnn(embed.float(), [c.float() for c in cache])
        return self._run_rnn(embed, cache)

    def _run_rnn(self, embed: torch.Tensor, cache: List[torch.Tensor]) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        if self.is_lstm:
            out, (h, c) = self.rnn(embed, (cache[0], cache[1]))
            return out, [h, c]
        out, h = self.rnn(embed, cache[0])
        return out, [h]

    def forward(self, input: torch.Tensor, cache: Optional[List[torch.Tensor]] = None) -> torch.Tensor:
        state = self.init_state(input.size(0), input.device) if cache is None else cache
        out, _ = self._run(self.dropout(self.embed(input)), state)
        return self.projection(out)

    @torch.jit.export
    def forward_step(self, input: torch.Tensor, padding: torch.Tensor, cache: List[torch.Tensor]
                     ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        out, new = self._run(self.dropout(self.embed(input)), cache)
        keep = _keep(padding).view(1, -1, 1)  # states are [layers, B, hidden]
        return self.projection(out), [torch.where(keep, old, s) for old, s in zip(cache, new)]

    @torch.jit.export
    def batch_to_cache(self, cache: List[torch.Tensor]) -> List[List[torch.Tensor]]:
        rows = [torch.split(state, 1, dim=1) for state in cache]
        return [[state_rows[b] for state_rows in rows] for b in range(cache[0].size(1))]

    @torch.jit.export
    def cache_to_batch(self, cache: List[List[torch.Tensor]]) -> List[torch.Tensor]:
        return [torch.cat([row[i] for row in cache], dim=1) for i in range(len(cache[0]))]


class _HistoryPredictor(Predictor):
    """A predictor that sees the last ``context_size`` tokens (the current one and
    ``history_size`` before it); before the first token the history is ``history_size``
    **zero vectors** (WeNet's: not embeddings of ``<blank>``).  State: ``[history]``,
    ``[B, history_size, embed_size]``, the embeddings of the last ``history_size`` tokens."""

    def __init__(self, vocab_size: int, embed_size: int, embed_dropout: float, history_size: int):
        super().__init__()
        if history_size < 0:
            raise ValueError(f"history_size must be >= 0, got {history_size}")
        self.embed_size = embed_size
        self.context_size = history_size + 1
        self.embed = nn.Embedding(vocab_size, embed_size)
        self.embed_dropout = Dropout(embed_dropout)

    @torch.jit.export
    def output_size(self) -> int:
        return self.embed_size

    @torch.jit.export
    def init_state(self, batch_size: int, device: torch.device) -> List[torch.Tensor]:
        return [torch.zeros(batch_size, self.context_size - 1, self.embed_size, device=device,
                            dtype=self.embed.weight.dtype)]

    def mix(self, windows: torch.Tensor) -> torch.Tensor:
        """``windows [B, U, context_size, embed_size]`` (oldest first) -> ``[B, U, P]``."""
        raise NotImplementedError

    def forward(self, input: torch.Tensor, cache: Optional[List[torch.Tensor]] = None) -> torch.Tensor:
        history = self.init_state(input.size(0), input.device)[0] if cache is None else cache[0]
        x = torch.cat([history, self.embed_dropout(self.embed(input))], dim=1)  # [B, C-1+U, E]
        windows = x.unfold(1, self.context_size, 1).transpose(2, 3)            # [B, U, C, E]
        return self.mix(windows)

    @torch.jit.export
    def forward_step(self, input: torch.Tensor, padding: torch.Tensor, cache: List[torch.Tensor]
                     ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        history = cache[0]
        context = torch.cat([history, self.embed_dropout(self.embed(input))], dim=1)  # [B, C, E]
        out = self.mix(context.unsqueeze(1))
        new = context[:, 1:]
        return out, [torch.where(_keep(padding).view(-1, 1, 1), history, new)]

    @torch.jit.export
    def batch_to_cache(self, cache: List[torch.Tensor]) -> List[List[torch.Tensor]]:
        return [[row] for row in torch.split(cache[0], 1, dim=0)]

    @torch.jit.export
    def cache_to_batch(self, cache: List[List[torch.Tensor]]) -> List[torch.Tensor]:
        return [torch.cat([row[0] for row in cache], dim=0)]


class EmbeddingPredictor(_HistoryPredictor):
    """WeNet's ``embedding`` predictor (stateless; arXiv 2109.07513):
    ``act(norm(ffn(m)))`` where, for the window ``x_0 .. x_{C−1}`` of embeddings (oldest first)
    and ``W = pos_embed.weight.view(n_head, embed_size, C)`` (WeNet reads the ``[n_head,
    embed_size · C]`` weight of its ``pos_embed`` linear this way; the linear itself is never
    applied),

        m = 1 / (n_head · C) · Σ_h Σ_c (Σ_e W[h, e, c] · x_c[e]) · x_c.

    The sum over heads distributes over the product, so it is computed once with
    ``Σ_h W[h]`` (the same value as WeNet's per-head loop, to rounding)."""

    def __init__(self, vocab_size: int, embed_size: int, output_size: int, embed_dropout: float,
                 n_head: int, history_size: int = 2, activation: str = "swish", bias: bool = False,
                 layer_norm_epsilon: float = 1e-5):
        super().__init__(vocab_size, embed_size, embed_dropout, history_size)
        if output_size != embed_size:
            raise ValueError(f"output_size ({output_size}) must equal embed_size ({embed_size})")
        self.num_heads = n_head
        # only its weight is read, as [n_head, embed, context]; a bias (WeNet's `bias: true`) is
        # a parameter WeNet creates and never uses, kept for its checkpoints
        self.pos_embed = nn.Linear(embed_size * self.context_size, n_head, bias=bias)
        self.ffn = nn.Linear(embed_size, embed_size)
        self.norm = nn.LayerNorm(embed_size, eps=layer_norm_epsilon)
        self.activation = ACTIVATIONS[activation]()

    def mix(self, windows: torch.Tensor) -> torch.Tensor:
        position = self.pos_embed.weight.view(self.num_heads, self.embed_size, self.context_size).sum(0)
        scores = torch.einsum("buce,ec->buc", windows, position)
        mixed = torch.einsum("buc,buce->bue", scores, windows) / (self.num_heads * self.context_size)
        return self.activation(self.norm(self.ffn(mixed)))


class ConvPredictor(_HistoryPredictor):
    """WeNet's ``conv`` predictor (stateless): ``act(norm(conv(window)))`` with ``conv`` a
    depthwise convolution over the ``C`` embeddings of the window (kernel ``C``, one filter
    per channel)."""

    def __init__(self, vocab_size: int, embed_size: int, output_size: int, embed_dropout: float,
                 history_size: int = 2, activation: str = "relu", bias: bool = False,
                 layer_norm_epsilon: float = 1e-5):
        super().__init__(vocab_size, embed_size, embed_dropout, history_size)
        if output_size != embed_size:
            raise ValueError(f"output_size ({output_size}) must equal embed_size ({embed_size})")
        self.conv = nn.Conv1d(embed_size, embed_size, kernel_size=self.context_size, groups=embed_size,
                              bias=bias)
        self.norm = nn.LayerNorm(embed_size, eps=layer_norm_epsilon)
        self.activation = ACTIVATIONS[activation]()

    def mix(self, windows: torch.Tensor) -> torch.Tensor:
        # a depthwise kernel over one window is a weighted sum of its C embeddings per channel
        out = torch.einsum("buce,ec->bue", windows, self.conv.weight.squeeze(1))
        bias = self.conv.bias
        if bias is not None:
            out = out + bias
        return self.activation(self.norm(out))


# predictor: <name> -> class, built with predictor_conf's values (asrkit.models.transducer.schema)
PREDICTORS: dict[str, type[Predictor]] = {"rnn": RNNPredictor, "embedding": EmbeddingPredictor,
                                          "conv": ConvPredictor}
