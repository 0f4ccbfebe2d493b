"""Decoding: CTC greedy / prefix beam search, attention beam search, attention rescoring
and the transducer searches (one TorchScript-compatible implementation each, shared with
:mod:`asrkit.export`), the registry of decoding modes, the options of a decoding run and
batch decoding; LM fusion and contextual biasing (:mod:`asrkit.decode.fusion`,
:mod:`asrkit.decode.context_graph`).

The modules, each importing only those before it: ``search_defaults``; ``context_graph``,
``fusion``, ``transducer_hypothesis``, ``ctc_search``, ``attention_search``, ``alignment``
(hypotheses and search steps); ``searcher``, ``transducer_search`` (the searches);
``shared`` (the outputs the modes of a batch share); ``transducer_modes``, ``modes`` (the
registry); ``options``; ``batch``, ``recognizer``.

The names below are read from their modules on first use, so that importing one module of
the package (the options, which the command lines read before torch loads) imports no other.
"""
import importlib

_MODULE_OF = {
    "decode": "batch", "encoder_output": "batch",
    "Hypothesis": "ctc_search", "PrefixBeamSearch": "ctc_search", "apply_blank_penalty": "ctc_search",
    "ctc_greedy_search": "ctc_search", "ctc_prefix_beam_search": "ctc_search",
    "ctc_prefix_beam_search_nbest": "ctc_search",
    "Fusion": "fusion",
    "MODES": "modes", "REGISTRY": "modes", "DecodingMode": "modes", "ModeError": "modes", "check_modes": "modes",
    "mode_nbest": "modes", "register_mode": "modes",
    "DecodingOptionError": "options", "DecodingOptions": "options", "build_fusion": "options",
    "Searcher": "searcher", "attention_beam_search": "searcher", "attention_rescoring": "searcher",
    "rescoring_scores": "searcher",
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
