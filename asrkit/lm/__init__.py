"""n-gram language models, one module per concern:

* :mod:`~asrkit.lm.words` -- what the model's words are (whitespace-separated fields, each
  CJK character a word of its own), one rule for estimating and for decoding;
* :mod:`~asrkit.lm.arpa` -- the ARPA format (reading, refusing what is not a complete
  model, writing) and :class:`~asrkit.lm.arpa.NgramLm`, the back-off scorer the searches
  query (TorchScript's subset);
* :mod:`~asrkit.lm.estimate` -- interpolated modified Kneser-Ney estimation with pruning,
  as KenLM's ``lmplz`` (``tools/train_lm.py``).

Shallow fusion and contextual biasing, which use the scorer, are :mod:`asrkit.decode.fusion`'s.
"""
from asrkit.lm.arpa import Arpa, ArpaError, NgramLm, build_ngram_lm, format_arpa, load_lm, read_arpa
from asrkit.lm.estimate import EstimateError, estimate, estimate_from_texts
from asrkit.lm.words import lm_words

__all__ = ["Arpa", "ArpaError", "EstimateError", "NgramLm", "build_ngram_lm", "estimate", "estimate_from_texts",
           "format_arpa", "lm_words", "load_lm", "read_arpa"]
