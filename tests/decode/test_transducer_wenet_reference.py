"""The transducer decoding modes against WeNet's own outputs (``tests/fixtures/wenet/transducer``,
its README): both reference models, every mode WeNet decoded (the four CTC/attention modes of the
transducer model included), full context and the U2++ model's chunk 4 -- WeNet's tokens, and its
scores to 1e-3 wherever it reports one (``rnnt_beam_search`` with its whole n-best), by the
transducer searches directly and through the registry's ``decode``."""
from __future__ import annotations

import pytest
import torch

from asrkit.decode import transducer_modes as td
from asrkit.decode.batch import decode, encoder_output
from asrkit.decode.shared import SharedOutputs
from asrkit.decode.options import DecodingOptions
from asrkit.decode.searcher import Searcher
from tests.models.transducer.wenet_transducer import load_reference, load_wenet_transducer

pytestmark = pytest.mark.usefixtures("one_thread")

CASES = [("rnnt_offline", "decode_full"), ("rnnt_stateless_u2pp", "decode_full"), ("rnnt_stateless_u2pp", "decode_chunk")]
TRANSDUCER_MODES = ("rnnt_greedy_search", "rnnt_beam_search", "rnnt_beam_attn_rescoring", "ctc_beam_td_attn_rescoring")
CTC_ATTENTION_MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring")
# the rescoring modes' weights of WeNet's reference (its recipe's), README "Decoding modes and parameters"
RESCORING = dict(ctc_weight=0.5, transducer_weight=0.5, attn_weight=0.5, reverse_weight=0.3,
                 search_ctc_weight=0.3, search_transducer_weight=0.7)


@pytest.fixture(scope="module")
def models():
    return {name: (load_wenet_transducer(name), load_reference(name)) for name in ("rnnt_offline", "rnnt_stateless_u2pp")}


def _shared(model, utt, chunk: int, **weights) -> SharedOutputs:
    feats = utt["feats"].unsqueeze(0)
    lengths = torch.tensor([feats.size(1)])
    options = DecodingOptions(modes=TRANSDUCER_MODES[:1], beam_size=4, decoding_chunk_size=chunk, **weights)
    with torch.inference_mode():
        enc, enc_lengths = encoder_output(model, feats, lengths, options)
    return SharedOutputs.from_options(Searcher.of_model(model), enc, enc_lengths, options, model)


def _chunk(entry: str) -> int:
    return 4 if entry == "decode_chunk" else -1


@pytest.mark.parametrize("name,entry", CASES)
def test_greedy_and_prefix_beam_search_give_wenets_tokens_and_scores(models, name, entry):
    model, ref = models[name]
    for utt in ref["utts"]:
        want = utt[entry]
        with torch.inference_mode():
            shared = _shared(model, utt, _chunk(entry))
            assert td.greedy_hypotheses(shared)[0].tokens == want["rnnt_greedy_search"]["tokens"], utt["key"]
            for mode, weights in (("rnnt_beam_search", (0.3, 0.7)), ("rnnt_beam_search_transducer_only", (0.0, 1.0))):
                shared = _shared(model, utt, _chunk(entry), search_ctc_weight=weights[0],
                                 search_transducer_weight=weights[1])
                beam = td.prefix_beam_nbest(shared)[0]
                assert [h.tokens for h in beam] == [n["tokens"] for n in want[mode]["nbest"]], (utt["key"], mode)
                assert [h.score for h in beam] == pytest.approx([n["score"] for n in want[mode]["nbest"]], abs=1e-3)


@pytest.mark.parametrize("name,entry", CASES)
def test_both_rescoring_modes_give_wenets_tokens_and_scores(models, name, entry):
    model, ref = models[name]
    for utt in ref["utts"]:
        with torch.inference_mode():
            shared = _shared(model, utt, _chunk(entry), **RESCORING)
            for mode, run in (("rnnt_beam_attn_rescoring", td.rnnt_beam_rescored),
                              ("ctc_beam_td_attn_rescoring", td.ctc_beam_rescored)):
                tokens, score = run(shared)[0]
                want = utt[entry][mode]
                assert tokens == want["tokens"], (utt["key"], mode)
                assert score == pytest.approx(want["score"], abs=1e-3), (utt["key"], mode)


@pytest.mark.parametrize("name,entry", CASES)
def test_every_mode_through_decode_gives_wenets_tokens_and_scores(models, name, entry):
    """The registry's path (one encoder pass shared by all modes, as ``recognize`` runs it) for
    every mode WeNet decoded, with WeNet's parameters: its CTC/attention modes of the transducer
    model (ctc_weight 0.3) and both rescoring modes (the recipe's weights) -- WeNet's tokens; and
    WeNet's scores to 1e-3 for the CTC/attention modes that report one (the CTC prefix score,
    attention_rescoring's total; ``ctc_greedy_search`` and ``attention`` report 0.0).  The
    transducer modes' scores are the tests above.  ``decode`` returns tokens only: the scores
    come from the outputs its modes share, built as ``decode`` builds them (``encoder_output``,
    ``SharedOutputs.from_options``)."""
    model, ref = models[name]
    searcher = Searcher.of_model(model)
    chunk = _chunk(entry)
    ctc_attention = DecodingOptions(modes=(*CTC_ATTENTION_MODES, *TRANSDUCER_MODES[:2]), beam_size=4,
                                    ctc_weight=0.3, reverse_weight=0.3, decoding_chunk_size=chunk)
    rescoring = DecodingOptions(modes=TRANSDUCER_MODES[2:], beam_size=4, decoding_chunk_size=chunk, **RESCORING)
    for utt in ref["utts"]:
        feats = utt["feats"].unsqueeze(0)
        lengths = torch.tensor([feats.size(1)])
        want = utt[entry]
        for options in (ctc_attention, rescoring):
            got = decode(model, feats, lengths, options)
            for mode in options.modes:
                assert got[mode][0] == want[mode]["tokens"], (utt["key"], mode)
        with torch.inference_mode():
            enc, enc_lengths = encoder_output(model, feats, lengths, ctc_attention)
            shared = SharedOutputs.from_options(searcher, enc, enc_lengths, ctc_attention, model)
            nbest, ctc_scores = shared.nbest()
            assert ctc_scores[0][0] == pytest.approx(want["ctc_prefix_beam_search"]["score"], abs=1e-3), utt["key"]
            _, totals = searcher.attention_rescoring(enc, enc_lengths, nbest, ctc_scores, 0.3, 0.3)
            assert totals[0] == pytest.approx(want["attention_rescoring"]["score"], abs=1e-3), utt["key"]
