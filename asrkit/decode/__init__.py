"""Decoding: CTC greedy / prefix beam search, attention beam search, attention rescoring
(one TorchScript-compatible implementation each, shared with :mod:`asrkit.export`), the
registry of decoding modes, the options of a decoding run and batch decoding; LM fusion and
contextual biasing (:mod:`asrkit.decode.fusion`, :mod:`asrkit.decode.context_graph`)."""
from asrkit.decode.batch import decode, encoder_output
from asrkit.decode.ctc_search import (Hypothesis, PrefixBeamSearch, apply_blank_penalty, ctc_greedy_search,
                                      ctc_prefix_beam_search, ctc_prefix_beam_search_nbest)
from asrkit.decode.fusion import Fusion, build_fusion
from asrkit.decode.modes import (MODES, REGISTRY, DecodingMode, ModeError, check_modes, mode_nbest,
                                 register_mode)
from asrkit.decode.options import DecodingOptionError, DecodingOptions
from asrkit.decode.searcher import Searcher, attention_beam_search, attention_rescoring, rescoring_scores

__all__ = ["DecodingMode", "DecodingOptionError", "DecodingOptions", "Fusion", "Hypothesis", "MODES", "ModeError",
           "PrefixBeamSearch", "build_fusion", "REGISTRY", "Searcher", "apply_blank_penalty", "attention_beam_search",
           "attention_rescoring", "check_modes", "ctc_greedy_search", "ctc_prefix_beam_search",
           "ctc_prefix_beam_search_nbest", "decode", "encoder_output", "mode_nbest", "register_mode",
           "rescoring_scores"]
