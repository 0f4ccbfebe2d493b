"""Decoding: CTC greedy / prefix beam search, attention beam search, attention rescoring
(one TorchScript-compatible implementation each, shared with :mod:`asrkit.export`), and
the registry of decoding modes."""
from asrkit.decode.ctc_search import (Hypothesis, PrefixBeamSearch, apply_blank_penalty, ctc_greedy_search,
                                      ctc_prefix_beam_search, ctc_prefix_beam_search_nbest)
from asrkit.decode.modes import REGISTRY, DecodingMode, ModeError, check_modes, register_mode
from asrkit.decode.search import MODES, DecodingOptionError, check_decoding_options, decode, encoder_output
from asrkit.decode.searcher import Searcher, attention_beam_search, attention_rescoring, rescoring_scores

__all__ = ["DecodingMode", "DecodingOptionError", "Hypothesis", "MODES", "ModeError", "PrefixBeamSearch",
           "REGISTRY", "Searcher", "apply_blank_penalty", "attention_beam_search", "attention_rescoring",
           "check_decoding_options", "check_modes", "ctc_greedy_search", "ctc_prefix_beam_search",
           "ctc_prefix_beam_search_nbest", "decode", "encoder_output", "register_mode", "rescoring_scores"]
