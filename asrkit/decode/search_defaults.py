"""The defaults a search takes itself for a parameter that :class:`asrkit.decode.options.DecodingOptions`
also sets: one value each, named by the searches (below the options) and by the options'
fields.  A leaf -- no torch, no asrkit import -- so that the options, which the command
lines read when they build their parsers, need neither.  Every other decoding default is
a :class:`~asrkit.decode.options.DecodingOptions` field's own."""

# CTC prefix beam search: a frame whose blank probability exceeds this only extends existing
# prefixes by blank or by repeating their last token (no new prefixes); 1.0 skips none
DEFAULT_BLANK_SKIP_THRESHOLD = 0.999
# rnnt_beam_search (WeNet's transducer prefix beam search): the weights of the CTC and of the
# joint's probabilities (WeNet's transducer recipe's values)
DEFAULT_SEARCH_CTC_WEIGHT = 0.3
DEFAULT_SEARCH_TRANSDUCER_WEIGHT = 0.7
