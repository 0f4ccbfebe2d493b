"""The TorchScript module of a trained :class:`asrkit.models.AsrModel`.

:class:`ScriptableAsr` wraps the trained submodules (CMVN, encoder) and the searchers (a
:class:`asrkit.decode.searcher.Searcher`; a transducer's
:class:`asrkit.decode.transducer_search.TransducerSearcher`) in one ``nn.Module`` that
``torch.jit.script`` compiles: the real model code is scripted (not traced), so any batch
size and any input length work.  It defines no search: its search methods delegate to the
searchers -- the very code eager decoding runs -- so the exported module returns the same
hypotheses and scores as eager :func:`asrkit.decode.decode`.

Which modes a model supports, and the message refusing each other one, are read from the
decoding-mode registry (:mod:`asrkit.decode.modes`) when the module is built and stored in
it (TorchScript cannot call the registry): ``supported_modes()`` lists the modes the module
runs (:func:`~asrkit.decode.modes.scripted_modes`, a branch of ``decode`` each) whose needs
the model meets; ``decode`` refuses others with the registry's words ("mode attention needs
an attention decoder; this model has none (...)", "unknown decoding mode '...'; ...").

WeNet's C++ runtime (``TorchAsrModel``) loads the archive as it loads WeNet's own
``final.zip``: at load time it reads ``subsampling_rate()``, ``right_context()``,
``sos_symbol()``, ``eos_symbol()`` and ``is_bidirectional_decoder()``; per chunk it calls
``forward_encoder_chunk(xs, offset, required_cache_size, att_cache, cnn_cache)`` on raw
fbank (CMVN is applied inside, as WeNet's encoder carries its ``global_cmvn``) and
``ctc_activation(y)``; at the end ``forward_attention_decoder(hyps, hyps_lens,
encoder_out, reverse_weight)`` for attention rescoring.  All of them have WeNet's
signatures and semantics (``tests/export/test_wenet_runtime.py`` drives the module the
way the runtime does).

The wrapper reaches the model only through its submodules' ``forward`` methods
(``cmvn(x)``, ``encoder(feats, lengths)``, ``encoder.forward_chunk``, ``ctc(enc_out)``,
``decoder(memory, memory_mask, ys_in, ys_in_lengths, r_ys_in, memory_index)``,
``decoder.forward_one_step``), so it follows refactors inside them.
"""
# (no ``from __future__ import annotations``: TorchScript reads the class-level attribute
# annotations of ScriptableAsr as typing objects, not strings)
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from asrkit.decode.attention_search import reversed_decoder_inputs
from asrkit.decode.modes import CTC_HEAD, REGISTRY, UNKNOWN_MODE, refusal, scripted_modes
from asrkit.decode.options import DEFAULTS
from asrkit.decode.searcher import Searcher
from asrkit.decode.transducer_search import MAX_SYMBOLS_PER_FRAME, TransducerSearcher
from asrkit.models.cmvn import RawFbankNormalization

SCRIPTED_MODES = scripted_modes()  # the registered modes ScriptableAsr.decode runs (one branch each)


class ScriptableAsr(nn.Module):
    """A trained model, its searcher and metadata, ready for ``torch.jit.script``.

    ``model``: an :class:`asrkit.models.AsrModel` in eval mode with a CTC head, an
    attention decoder, or both; or a transducer (its predictor and joint in a
    :class:`asrkit.decode.transducer_search.TransducerSearcher`, ``transducer``; ``None``
    for other models).  ``units``: the unit symbols by id.
    ``feature_cmvn``: ``(mean, istd)`` of a data-pipeline CMVN (``dataset_conf.cmvn_file``)
    so that the exported module takes raw fbank features in every case; the model's own
    CMVN layer (``cmvn: global_cmvn``) is used as it is.
    """

    # read from the registry at export time (see the module docstring); typed here because
    # TorchScript cannot infer the type of an empty container
    modes: List[str]             # supported modes, in registration order
    mode_refusals: Dict[str, str]  # mode -> why this model cannot run it
    ctc_modes: List[str]         # the modes needing a CTC head
    unknown_mode: str            # the message for a mode name not registered, .format(name)

    def __init__(self, model: nn.Module, units: List[str], *, sample_rate: int, num_mel_bins: int,
                 frame_length: float, frame_shift: float,
                 feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                 unit_separator: str = ""):
        super().__init__()
        predictor = getattr(model, "predictor", None)
        if model.ctc is None and model.decoder is None and predictor is None:
            raise ValueError("the model has neither a CTC head nor an attention decoder: nothing to decode with")
        if len(units) != model.vocab_size:
            raise ValueError(f"{len(units)} units, the model has {model.vocab_size} outputs")
        self.normalizer = RawFbankNormalization(model.cmvn, feature_cmvn)
        self.encoder = model.encoder
        self.searcher = Searcher.of_model(model)
        self.transducer: Optional[TransducerSearcher] = (TransducerSearcher.of_model(model) if predictor is not None
                                                         else None)
        self.max_symbols = MAX_SYMBOLS_PER_FRAME  # (TorchScript reads no module-level constants)
        self.vocab = int(model.vocab_size)
        self.sos = int(model.sos)
        self.eos = int(model.eos)
        self.blank = int(model.blank_id)
        self.unit_table: List[str] = list(units)
        self.separator = unit_separator
        self.subsampling = int(model.encoder.subsampling_rate)
        self.min_frames = int(model.encoder.min_input_length)
        self.context = self.min_frames - 1  # frames an output frame sees beyond its first
        self.bidirectional = bool(model.decoder is not None and model.decoder.has_reverse)
        self.rate = int(sample_rate)
        self.mel_bins = int(num_mel_bins)
        self.frame_length_ms = float(frame_length)
        self.frame_shift_ms = float(frame_shift)
        known = list(scripted_modes())
        reasons = {name: refusal(name, self.searcher) for name in known}
        self.modes = [name for name in known if reasons[name] is None]
        self.mode_refusals = {name: r for name, r in reasons.items() if r is not None}
        self.ctc_modes = [name for name in known if CTC_HEAD in REGISTRY[name].needs]
        self.unknown_mode = UNKNOWN_MODE.format("{}", known)

    # ------------------------------------------------------------------ metadata
    @torch.jit.export
    def sos_symbol(self) -> int:
        return self.sos

    @torch.jit.export
    def eos_symbol(self) -> int:
        return self.eos

    @torch.jit.export
    def blank_id(self) -> int:
        return self.blank

    @torch.jit.export
    def vocab_size(self) -> int:
        return self.vocab

    @torch.jit.export
    def units(self) -> List[str]:
        """Unit symbols indexed by id, the special units where the dictionary put them
        (``blank_id()``, ``sos_symbol()``/``eos_symbol()``: e.g. 0 and 2 in WeNet's layout)."""
        return self.unit_table

    @torch.jit.export
    def unit_separator(self) -> str:
        """How a hypothesis becomes text: its units (``<blank>`` and ``<sos/eos>`` left
        out) joined with this string.  ``""`` (char and BPE units): then ``▁`` becomes a
        space and the ends are stripped; ``" "``: space-separated units
        (``tokenizer_conf.split_with_space``), used as they are."""
        return self.separator

    @torch.jit.export
    def subsampling_rate(self) -> int:
        return self.subsampling

    @torch.jit.export
    def right_context(self) -> int:
        """Input frames an output frame sees beyond its first one (the subsampling's
        context: 6 for 4x, 10 for 6x, 14 for 8x; WeNet's ``embed.right_context``)."""
        return self.context

    @torch.jit.export
    def min_input_length(self) -> int:
        """Fewest feature frames giving one encoder frame (shorter input is refused)."""
        return self.min_frames

    @torch.jit.export
    def is_bidirectional_decoder(self) -> bool:
        return self.bidirectional

    @torch.jit.export
    def has_decoder(self) -> bool:
        return self.searcher.has_decoder()

    @torch.jit.export
    def has_ctc(self) -> bool:
        return self.searcher.has_ctc()

    @torch.jit.export
    def supported_modes(self) -> List[str]:
        """Every decoding mode this module runs, in the registry's order: the registered
        modes whose needs the model meets (the CTC searches with a CTC head, ``attention``
        with a decoder, ``attention_rescoring`` with both)."""
        return list(self.modes)

    @torch.jit.export
    def default_modes(self) -> List[str]:
        """What :meth:`decode` runs without ``modes``: every supported mode but ``attention``
        when the model has a CTC head (``attention``'s own beam search shares nothing with the
        CTC pass the others read)."""
        modes: List[str] = []
        for mode in self.supported_modes():
            if mode != "attention" or not self.has_ctc():
                modes.append(mode)
        return modes

    @torch.jit.export
    def sample_rate(self) -> int:
        """Audio is resampled to this rate before the filterbank."""
        return self.rate

    @torch.jit.export
    def num_mel_bins(self) -> int:
        return self.mel_bins

    @torch.jit.export
    def frame_length(self) -> float:
        """Filterbank window in milliseconds."""
        return self.frame_length_ms

    @torch.jit.export
    def frame_shift(self) -> float:  # (the filterbank hop in milliseconds)
        return self.frame_shift_ms

    @torch.jit.export
    def dither(self) -> float:  # (decoding uses none)
        return 0.0

    @torch.jit.export
    def energy_floor(self) -> float:
        return 0.0

    # ------------------------------------------------------------------ network
    @torch.jit.export
    def normalize(self, feats: torch.Tensor) -> torch.Tensor:
        """Raw fbank -> what the encoder reads (:class:`RawFbankNormalization`)."""
        return self.normalizer(feats)

    def forward(self, feats: torch.Tensor, feats_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Raw Kaldi fbank ``[B, T, F]`` (zero-padded) and lengths ``[B]`` ->
        ``(encoder_out [B, T', D], encoder_lengths [B])``, CMVN included."""
        return self.encoder(self.normalize(feats), feats_lengths)

    @torch.jit.export
    def forward_encoder_chunk(self, xs: torch.Tensor, offset: int, required_cache_size: int,
                              att_cache: torch.Tensor = torch.zeros(0, 0, 0, 0),
                              cnn_cache: torch.Tensor = torch.zeros(0, 0, 0, 0)
                              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk of a stream, WeNet's streaming interface (what its C++ runtime calls
        per chunk): the encoder's ``forward_chunk`` on raw fbank, CMVN included.

        ``xs [1, T_in, F]``: raw fbank of the chunk, ``(chunk − 1)·subsampling_rate() +
        right_context() + 1`` frames (the last one may be shorter: WeNet's runtime sends
        more than ``right_context() + 1``), consecutive chunks overlapping by
        ``right_context() + 1 − subsampling_rate()`` frames; the whole utterance for full
        context.  ``offset``:
        encoder frames returned so far in this stream.  ``required_cache_size``: attention
        cache frames to keep for the next chunk (``chunk · num_left_chunks``; < 0 keeps
        all).  ``att_cache [num_blocks, H, C, 2·d_k]`` and ``cnn_cache [num_blocks, 1, D,
        kernel − 1]``: what the previous call returned, ``torch.zeros(0, 0, 0, 0)`` at the
        start.  Returns ``(y [1, T, D], new_att_cache, new_cnn_cache)``; the caller
        advances ``offset`` by ``T`` and passes ``y`` to :meth:`ctc_activation`."""
        return self.encoder.forward_chunk(self.normalize(xs), offset, required_cache_size, att_cache, cnn_cache)

    @torch.jit.export
    def ctc_log_probs(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """CTC log-posteriors ``[B, T', V]`` (fp32)."""
        return self.searcher.ctc_log_probs(encoder_out)

    @torch.jit.export
    def ctc_activation(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """WeNet's name for :meth:`ctc_log_probs`: ``[1, T, D]`` of a chunk (or any
        ``[B, T, D]``) -> CTC log-posteriors ``[B, T, V]`` (fp32, contiguous)."""
        return self.searcher.ctc_log_probs(encoder_out)

    @torch.jit.export
    def forward_attention_decoder(self, hyps: torch.Tensor, hyps_lens: torch.Tensor,
                                  encoder_out: torch.Tensor, reverse_weight: float = 0.0
                                  ) -> Tuple[torch.Tensor, torch.Tensor]:
        """WeNet's rescoring interface for one utterance: ``hyps [N, L]`` start with
        ``<sos>`` (padding any id; WeNet's runtime pads with 0), ``hyps_lens [N]`` count
        the ``<sos>``, ``encoder_out [1, T', D]`` (all frames valid: the runtime's
        concatenated chunk outputs).  Returns decoder log-probabilities ``[N, L, V]``
        left-to-right and, when ``reverse_weight > 0`` and the decoder is bidirectional,
        ``[N, L, V]`` right-to-left over ``<sos>`` + the reversed tokens (row ``j`` scores
        the ``j``-th token of the reversed hypothesis, row ``len`` its ``<eos>``); else
        zeros of that shape (WeNet returns a scalar there, which nobody reads)."""
        decoder = self.searcher.decoder
        if decoder is None:
            raise RuntimeError("this model has no attention decoder (it was trained with ctc_weight 1)")
        else:
            if encoder_out.size(0) != 1:
                raise RuntimeError("forward_attention_decoder takes one utterance's encoder_out [1, T, D]")
            n = hyps.size(0)
            index = torch.zeros(n, dtype=torch.long, device=hyps.device)
            memory_mask = torch.ones(n, 1, encoder_out.size(1), dtype=torch.bool, device=encoder_out.device)
            r_hyps: Optional[torch.Tensor] = None
            if reverse_weight > 0.0 and self.bidirectional:
                tokens: List[List[int]] = []
                for i in range(n):
                    row: List[int] = hyps[i, 1:int(hyps_lens[i])].tolist()
                    tokens.append(row)
                r_hyps = reversed_decoder_inputs(tokens, self.sos, self.eos, hyps.device, hyps.size(1))[0]
            logits, r_logits = decoder(encoder_out, memory_mask, hyps, hyps_lens, r_hyps, index)
            logp = torch.log_softmax(logits.float(), dim=-1)
            if r_logits is None:
                return logp, torch.zeros_like(logp)
            return logp, torch.log_softmax(r_logits.float(), dim=-1)

    # ------------------------------------------------------------------ searches (delegating)
    @torch.jit.export
    def ctc_prefix_beam_search_nbest(self, log_probs: torch.Tensor, lengths: torch.Tensor,
                                     beam_size: int = DEFAULTS["beam_size"],
                                     blank_skip_threshold: float = DEFAULTS["blank_skip_threshold"]
                                     ) -> Tuple[List[List[List[int]]], List[List[float]]]:
        """N-best prefixes (at most ``beam_size``, best first) of every utterance from CTC
        log-posteriors ``[B, T', V]``, with their CTC log-probabilities."""
        return self.searcher.ctc_nbest(log_probs, lengths, beam_size, blank_skip_threshold)

    # (TorchScript takes keyword arguments between methods but not their defaults: every
    # argument of decode is named, the unused ones at values that change nothing)
    @torch.jit.export
    def ctc_greedy_search(self, feats: torch.Tensor, feats_lengths: torch.Tensor,
                          blank_penalty: float = DEFAULTS["blank_penalty"]) -> List[List[int]]:
        """Token ids per utterance, best CTC path."""
        return self.decode(feats=feats, feats_lengths=feats_lengths, beam_size=1, ctc_weight=0.0,
                           reverse_weight=0.0, blank_skip_threshold=1.0, modes=["ctc_greedy_search"],
                           length_penalty=0.0, blank_penalty=blank_penalty, search_ctc_weight=0.0,
                           search_transducer_weight=1.0)["ctc_greedy_search"]

    @torch.jit.export
    def ctc_prefix_beam_search(self, feats: torch.Tensor, feats_lengths: torch.Tensor,
                               beam_size: int = DEFAULTS["beam_size"],
                               blank_skip_threshold: float = DEFAULTS["blank_skip_threshold"],
                               blank_penalty: float = DEFAULTS["blank_penalty"]) -> List[List[int]]:
        """Token ids per utterance, best prefix of the CTC prefix beam search."""
        return self.decode(feats=feats, feats_lengths=feats_lengths, beam_size=beam_size, ctc_weight=0.0,
                           reverse_weight=0.0, blank_skip_threshold=blank_skip_threshold,
                           modes=["ctc_prefix_beam_search"], length_penalty=0.0,
                           blank_penalty=blank_penalty, search_ctc_weight=0.0,
                           search_transducer_weight=1.0)["ctc_prefix_beam_search"]

    @torch.jit.export
    def attention(self, feats: torch.Tensor, feats_lengths: torch.Tensor, beam_size: int = DEFAULTS["beam_size"],
                  length_penalty: float = DEFAULTS["length_penalty"]) -> List[List[int]]:
        """Token ids per utterance, attention-decoder beam search."""
        return self.decode(feats=feats, feats_lengths=feats_lengths, beam_size=beam_size, ctc_weight=0.0,
                           reverse_weight=0.0, blank_skip_threshold=1.0, modes=["attention"],
                           length_penalty=length_penalty, blank_penalty=0.0, search_ctc_weight=0.0,
                           search_transducer_weight=1.0)["attention"]

    @torch.jit.export
    def attention_rescoring(self, feats: torch.Tensor, feats_lengths: torch.Tensor,
                            beam_size: int = DEFAULTS["beam_size"], ctc_weight: float = DEFAULTS["ctc_weight"],
                            reverse_weight: float = DEFAULTS["reverse_weight"],
                            blank_skip_threshold: float = DEFAULTS["blank_skip_threshold"],
                            blank_penalty: float = DEFAULTS["blank_penalty"]) -> List[List[int]]:
        """Token ids per utterance: the prefix-beam n-best rescored by the decoder(s)."""
        return self.decode(feats=feats, feats_lengths=feats_lengths, beam_size=beam_size, ctc_weight=ctc_weight,
                           reverse_weight=reverse_weight, blank_skip_threshold=blank_skip_threshold,
                           modes=["attention_rescoring"], length_penalty=0.0,
                           blank_penalty=blank_penalty, search_ctc_weight=0.0,
                           search_transducer_weight=1.0)["attention_rescoring"]

    @torch.jit.export
    def decode(self, feats: torch.Tensor, feats_lengths: torch.Tensor, beam_size: int = DEFAULTS["beam_size"],
               ctc_weight: float = DEFAULTS["ctc_weight"], reverse_weight: float = DEFAULTS["reverse_weight"],
               blank_skip_threshold: float = DEFAULTS["blank_skip_threshold"], modes: Optional[List[str]] = None,
               length_penalty: float = DEFAULTS["length_penalty"], blank_penalty: float = DEFAULTS["blank_penalty"],
               search_ctc_weight: float = DEFAULTS["search_ctc_weight"],
               search_transducer_weight: float = DEFAULTS["search_transducer_weight"]
               ) -> Dict[str, List[List[int]]]:
        """Token ids per utterance for each of ``modes`` (default: :meth:`default_modes`) from one
        full-context encoder pass; the CTC modes and ``attention_rescoring`` share one prefix beam
        search.  ``length_penalty``, ``blank_penalty``: WeNet's, as in :func:`asrkit.decode.decode`
        (0: none); ``search_ctc_weight``, ``search_transducer_weight``: ``rnnt_beam_search``'s.  A
        mode not in :meth:`supported_modes` raises ``RuntimeError`` (the registry's message)."""
        chosen = self.default_modes() if modes is None else modes
        needs_ctc = False
        for mode in chosen:
            if mode in self.mode_refusals:
                raise RuntimeError(self.mode_refusals[mode])
            if mode not in self.modes:
                raise RuntimeError(self.unknown_mode.format(mode))
            needs_ctc = needs_ctc or mode in self.ctc_modes or (mode == "rnnt_beam_search" and search_ctc_weight > 0)
        encoder_out, encoder_lengths = self.forward(feats, feats_lengths)
        results: Dict[str, List[List[int]]] = {}
        nbest: List[List[List[int]]] = []
        ctc_scores: List[List[float]] = []
        log_probs: Optional[torch.Tensor] = None
        if needs_ctc:
            log_probs = self.searcher.ctc_log_probs(encoder_out, blank_penalty)
            if "ctc_greedy_search" in chosen:
                results["ctc_greedy_search"] = self.searcher.ctc_greedy(log_probs, encoder_lengths)
            if "ctc_prefix_beam_search" in chosen or "attention_rescoring" in chosen:
                nbest, ctc_scores = self.searcher.ctc_nbest(log_probs, encoder_lengths, beam_size,
                                                            blank_skip_threshold)
        transducer = self.transducer
        for mode in chosen:  # (one branch per scripted mode: tests/decode/test_mode_consumers.py checks them)
            if mode == "ctc_prefix_beam_search":
                best: List[List[int]] = []
                for hyps in nbest:
                    if len(hyps) > 0:
                        best.append(hyps[0])
                    else:
                        best.append(torch.jit.annotate(List[int], []))
                results[mode] = best
            elif mode == "attention":
                results[mode] = self.searcher.attention_beam(encoder_out, encoder_lengths, beam_size,
                                                             length_penalty)[0]
            elif mode == "attention_rescoring":
                results[mode] = self.searcher.attention_rescoring(encoder_out, encoder_lengths, nbest, ctc_scores,
                                                                  ctc_weight, reverse_weight)[0]
            elif mode == "rnnt_greedy_search" and transducer is not None:
                best = [h.tokens for h in transducer.greedy_best(encoder_out, encoder_lengths, self.max_symbols)]
                results[mode] = best
            elif mode == "rnnt_beam_search" and transducer is not None:
                results[mode] = [h.tokens for h in transducer.prefix_beam_best(
                    encoder_out, encoder_lengths, log_probs, beam_size, search_ctc_weight, search_transducer_weight)]
            elif mode == "modified_beam_search" and transducer is not None:
                best = [h.tokens for h in transducer.modified_beam_best(encoder_out, encoder_lengths, beam_size)]
                results[mode] = best
            elif mode != "ctc_greedy_search":  # (supported, yet without a branch here)
                raise RuntimeError("mode " + mode + " has no scripted search")
        return results
