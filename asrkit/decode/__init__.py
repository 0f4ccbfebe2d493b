"""Decoding: CTC greedy / prefix beam search, attention beam search, attention rescoring."""
from asrkit.decode.attention_search import attention_beam_search, attention_rescoring, rescoring_scores
from asrkit.decode.ctc_search import Hypothesis, ctc_greedy_search, ctc_prefix_beam_search
from asrkit.decode.search import MODES, check_modes, decode

__all__ = ["Hypothesis", "MODES", "attention_beam_search", "attention_rescoring", "check_modes",
           "ctc_greedy_search", "ctc_prefix_beam_search", "decode", "rescoring_scores"]
