"""LM fusion and contextual biasing in the searches (asrkit.decode.fusion): constructed
posteriorgrams where the LM and the context graph each change the best path of the CTC
prefix beam search and of the transducer beam searches, the bonus taken back when a path
leaves a phrase, and weight 0 without phrases giving today's results bit for bit."""
import math

import pytest
import torch

from asrkit.decode import DecodingOptionError, DecodingOptions, decode
from asrkit.decode.context_graph import build_context_graph
from asrkit.decode.ctc_search import PrefixBeamSearch, ctc_prefix_beam_search_fused, ctc_prefix_beam_search_nbest
from asrkit.decode.fusion import Fusion, unit_kinds
from asrkit.decode.modes import MODES, fused_modes
from asrkit.decode.transducer_search import ModifiedBeamSearch, TransducerPrefixBeamSearch, TransducerSearcher
from asrkit.lm.arpa import load_lm
from asrkit.stream.recognizer import check_stream_fusion

pytestmark = pytest.mark.usefixtures("one_thread")

SYMBOLS = ["<blank>", "<unk>", "a", "b", "c", "d", "e", "\u2581", "<sos/eos>"]
ID = {s: i for i, s in enumerate(SYMBOLS)}
V = len(SYMBOLS)
KINDS, TEXTS = unit_kinds(SYMBOLS, silent=(0, 8))

# words "ab" (likely) and "ac" (unlikely)
UNIGRAMS = """\\data\\
ngram 1=5

\\1-grams:
-1.0\t</s>
-99\t<s>
-3.0\t<unk>
-0.1\tab
-2.0\tac

\\end\\
"""


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    path = tmp_path_factory.mktemp("lm") / "words.arpa"
    path.write_text(UNIGRAMS, encoding="utf-8")
    return load_lm(path)


def posteriorgram(*frames: dict) -> torch.Tensor:
    """log-probabilities ``[T, V]``: each frame's given units, the rest of its mass spread evenly."""
    rows = []
    for frame in frames:
        rest = (1.0 - sum(frame.values())) / (V - len(frame))
        rows.append([frame.get(s, rest) for s in SYMBOLS])
    return torch.tensor(rows, dtype=torch.float64).log().float()


def fusion(lm=None, weight=1.0, bonus=0.0, phrases=(), score=1.0, oov=10.0) -> Fusion:
    graph = build_context_graph([[ID[c] for c in p] for p in phrases], score, V) if phrases else None
    return Fusion(lm, weight, bonus, oov, KINDS, TEXTS, graph)


def best_ctc(log_probs: torch.Tensor, f=None, beam: int = 4):
    hyps, ctc, fused = ctc_prefix_beam_search_fused(log_probs.unsqueeze(0), torch.tensor([log_probs.size(0)]),
                                                    beam, 0, 1.0, f)
    text = ["".join(SYMBOLS[t] for t in h) for h in hyps[0]]
    return text, dict(zip(text, fused[0]))


AB_OR_AC = ({"a": 0.9}, {"b": 0.38, "c": 0.57}, {"<blank>": 0.95})


def test_the_lm_changes_the_best_ctc_path(lm):
    lp = posteriorgram(*AB_OR_AC)
    assert best_ctc(lp)[0][0] == "ac"
    text, fused = best_ctc(lp, fusion(lm))
    assert text[0] == "ab"
    # ln P(ab) + ln P(</s>) (unigrams), scored when the word ends: at the end of the utterance
    assert fused["ab"] == pytest.approx((-0.1 - 1.0) * math.log(10))


def test_word_bonus_and_word_boundaries(lm):
    """The space unit ends a word: "ab▁ac" is scored as two words, each with the bonus."""
    lp = posteriorgram({"a": 0.9}, {"b": 0.9}, {"\u2581": 0.9}, {"a": 0.9}, {"c": 0.9})
    text, fused = best_ctc(lp, fusion(lm, weight=0.5, bonus=2.0))
    assert text[0] == "ab\u2581ac"
    assert fused[text[0]] == pytest.approx(0.5 * (-0.1 - 2.0 - 1.0) * math.log(10) + 2 * 2.0)


def test_the_context_graph_changes_the_best_ctc_path():
    lp = posteriorgram(*AB_OR_AC)
    text, fused = best_ctc(lp, fusion(phrases=["ab"]))
    assert text[0] == "ab" and fused["ab"] == 2.0  # completed: len("ab") · 1 kept


def test_the_bonus_is_taken_back_when_the_ctc_path_leaves_the_phrase():
    """Phrase "abc"; the audio says e-b-d, "a" a little less likely than "e": "abd" earns the
    bonus for "ab" while it is built, but loses it at "d", so "ebd" stays the best."""
    lp = posteriorgram({"a": 0.38, "e": 0.57}, {"b": 0.95}, {"d": 0.95}, {"<blank>": 0.95})
    text, fused = best_ctc(lp, fusion(phrases=["abc"]))
    assert text[0] == "ebd" and fused["abd"] == 0.0 and fused["ebd"] == 0.0
    search = PrefixBeamSearch(4, 0, V, 1.0, fusion(phrases=["abc"]))
    search.feed(lp[:2])  # inside the search, "ab" leads with its pending bonus ...
    assert search.prefix(search.beam[0]) == [ID["a"], ID["b"]] and search.node_fused[search.beam[0]] == 2.0
    hyps, _, partial = search.nbest_fused()  # ... a partial result ranks the prefixes as ended: taken back
    assert [SYMBOLS[t] for t in hyps[0]] == ["e", "b"] and partial == [0.0] * len(hyps)


def test_lm_weight_0_and_no_phrases_are_bit_identical(lm):
    g = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(2.0 * torch.randn(3, 40, V, generator=g), dim=-1)
    lengths = torch.tensor([40, 33, 9])
    for threshold in (1.0, 0.5):
        plain = ctc_prefix_beam_search_nbest(lp, lengths, 5, 0, threshold)
        hyps, scores, fused = ctc_prefix_beam_search_fused(lp, lengths, 5, 0, threshold, fusion(lm, 0.0, 0.0))
        assert (hyps, scores) == plain and all(f == 0.0 for fs in fused for f in fs)


def test_scripted_search_equals_eager(lm):
    scripted = torch.jit.script(ctc_prefix_beam_search_fused)
    g = torch.Generator().manual_seed(1)
    lp = torch.log_softmax(torch.randn(2, 25, V, generator=g), dim=-1)
    args = (lp, torch.tensor([25, 17]), 4, 0, 0.999, fusion(lm, 0.7, 1.5, phrases=["ab", "bca"]))
    assert scripted(*args) == ctc_prefix_beam_search_fused(*args)


def test_chunked_feeding_with_fusion_equals_the_batch_search(lm):
    g = torch.Generator().manual_seed(2)
    lp = torch.log_softmax(2.0 * torch.randn(30, V, generator=g), dim=-1)
    f = fusion(lm, 0.5, 1.0, phrases=["ab", "cd"])
    search = PrefixBeamSearch(4, 0, V, 1.0, f)
    for start in range(0, 30, 7):
        search.feed(lp[start:start + 7])
    hyps, ctc, fused = ctc_prefix_beam_search_fused(lp.unsqueeze(0), torch.tensor([30]), 4, 0, 1.0, f)
    assert search.nbest_fused() == (hyps[0], ctc[0], fused[0])


# ------------------------------------------------------------------ transducer searches


class FramePredictor(torch.nn.Module):
    """A predictor that ignores the history: its output is always zero (one unit)."""

    def init_state(self, batch: int, device: torch.device):
        return [torch.zeros(batch, 1, device=device)]

    def forward_step(self, tokens, padding, state):
        return torch.zeros(tokens.size(0), 1, 1), state

    def cache_to_batch(self, cache):
        return [torch.cat([c[0] for c in cache])]

    def batch_to_cache(self, state):
        return [[state[0][i:i + 1]] for i in range(state[0].size(0))]


class FrameJoint(torch.nn.Module):
    """The joint's logits are the encoder frame itself: the frames are a posteriorgram."""

    def forward(self, enc, pred):
        return enc.unsqueeze(2) + 0.0 * pred.unsqueeze(1)


def transducer_best(kind: str, frames: torch.Tensor, f=None) -> str:
    searcher = TransducerSearcher(FramePredictor(), FrameJoint(), blank=0)
    if kind == "modified":
        search = ModifiedBeamSearch(searcher, torch.device("cpu"), beam_size=4, fusion=f)
    else:
        search = TransducerPrefixBeamSearch(searcher, torch.device("cpu"), beam_size=4, ctc_weight=0.0,
                                            transducer_weight=1.0, fusion=f)
    search.feed(frames)
    return "".join(SYMBOLS[t] for t in search.best().tokens)


@pytest.mark.parametrize("kind", ["modified", "prefix"])
def test_lm_and_context_graph_change_the_best_transducer_path(lm, kind):
    frames = posteriorgram(*AB_OR_AC)
    assert transducer_best(kind, frames) == "ac"
    assert transducer_best(kind, frames, fusion(lm)) == "ab"
    assert transducer_best(kind, frames, fusion(phrases=["ab"])) == "ab"
    leaving = posteriorgram({"a": 0.38, "e": 0.57}, {"b": 0.95}, {"d": 0.95}, {"<blank>": 0.95})
    assert transducer_best(kind, leaving, fusion(phrases=["abc"])) == "ebd"


def test_transducer_searches_with_weight_0_are_bit_identical(lm):
    from tests.models.transducer.tiny import tiny_transducer
    model = tiny_transducer().eval()
    g = torch.Generator().manual_seed(3)
    feats, lengths = torch.randn(2, 60, 20, generator=g), torch.tensor([60, 41])
    symbols = ["<blank>", "<unk>"] + list("abcdefgh") + ["\u2581", "<sos/eos>"]
    kinds, texts = unit_kinds(symbols, silent=(0, 11))
    zero = Fusion(lm, 0.0, 0.0, 10.0, kinds, texts, None)
    plain = DecodingOptions(modes=MODES, beam_size=3)
    fused = DecodingOptions(modes=MODES, beam_size=3, lm_path="words.arpa", lm_weight=0.0, word_bonus=0.0)
    assert decode(model, feats, lengths, fused, zero) == decode(model, feats, lengths, plain)
    with pytest.raises(DecodingOptionError, match="need fusion=build_fusion"):
        decode(model, feats, lengths, fused)


# ------------------------------------------------------------------ options


def test_fusion_options_are_checked_once():
    assert fused_modes(MODES) == ["ctc_prefix_beam_search", "attention_rescoring", "rnnt_beam_search",
                                  "modified_beam_search", "rnnt_beam_attn_rescoring", "ctc_beam_td_attn_rescoring"]
    options = DecodingOptions(modes=("attention_rescoring",), context_phrases=["one  two", "three"])
    assert options.context_bias_mode == "decoding-graph" and options.context_phrases == ("one two", "three")
    for kwargs, message in [
            (dict(modes=("ctc_greedy_search",), lm_path="lm.arpa"), "none of the modes given"),
            (dict(context_bias_mode="deep-biasing", context_phrases=("x",)), "deep-biasing needs a model"),
            (dict(context_bias_mode="decoding-graph"), "needs phrases"),
            (dict(context_phrases=("x", " ")), "an empty phrase"),
            (dict(lm_weight=-1.0), "lm_weight must be >= 0"),
            (dict(context_graph_score=float("nan")), "context_graph_score must be >= 0")]:
        with pytest.raises(DecodingOptionError, match=message):
            DecodingOptions(**kwargs)
    streaming = DecodingOptions(modes=("ctc_greedy_search", "ctc_prefix_beam_search"), decoding_chunk_size=4,
                                context_phrases=("ab",))
    with pytest.raises(DecodingOptionError, match="mode ctc_greedy_search takes no LM"):
        check_stream_fusion(streaming, fusion(phrases=["ab"]))


def test_a_word_the_lm_does_not_know_pays_the_oov_penalty(lm):
    """The audio says "ad" (not a word of the LM); "ac" is a word: with the OOV penalty the
    LM spells "ac", without it the word bonus pays for the unknown word."""
    lp = posteriorgram({"a": 0.9}, {"d": 0.9}, {"<blank>": 0.95})
    text, fused = best_ctc(lp, fusion(lm, weight=0.5, bonus=3.0, oov=10.0))
    assert text[0] == "ac"
    assert fused["ad"] == pytest.approx(0.5 * (-3.0 * math.log(10) - 10.0) + 3.0 + 0.5 * -1.0 * math.log(10))
    assert best_ctc(lp, fusion(lm, weight=0.5, bonus=3.0, oov=0.0))[0][0] == "ad"


def test_an_exported_archive_refuses_an_lm_and_phrases_in_one_line():
    """transcribe with a final.zip (a backend without the tokenizer the fusion needs): refused."""
    from types import SimpleNamespace
    from asrkit.transcribe.transcriber import Transcriber
    archive = SimpleNamespace(sample_rate=16000, units=SYMBOLS, description="exp/final.zip", bidirectional=False,
                              chunk_trained=False, check_mode=lambda mode: None)
    transcriber = Transcriber(archive)
    transcriber.check_options(DecodingOptions(modes=("attention_rescoring",)))
    with pytest.raises(DecodingOptionError, match="exp/final.zip: an exported archive's searches carry no LM"):
        transcriber.check_options(DecodingOptions(modes=("attention_rescoring",), context_phrases=("ab",)))
