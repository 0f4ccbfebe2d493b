"""LM fusion and context biasing per stream (StreamingRecognizer(..., fusion=...)) on WeNet's
U2++ model: each stream has its own phrases; a stream's final result equals the offline
decode of the same chunked encoder output with the same fusion."""
from __future__ import annotations

import pytest
import torch

from asrkit.decode import DecodingOptionError, DecodingOptions, decode
from asrkit.decode.options import build_fusion
from asrkit.stream.features import StreamingFbank
from asrkit.stream.recognizer import StreamingRecognizer
from asrkit.text.asrkit_rules import CharTokenizer
from asrkit.text.units import read_units
from tests.models.wenet_reference import FIXTURES, load_wenet_model
from tests.stream.test_recognizer import audio

pytestmark = pytest.mark.usefixtures("one_thread")
DIGITS = "zero oh one two three four five six seven eight nine".split()


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return load_wenet_model("u2pp"), CharTokenizer(read_units(FIXTURES / "u2pp" / "units.txt"))


def options(**fusion) -> DecodingOptions:
    return DecodingOptions(modes=("attention_rescoring",), decoding_chunk_size=4, beam_size=4, ctc_weight=0.3,
                           reverse_weight=0.3, blank_skip_threshold=1.0, **fusion)


def final_text(model, tokenizer, samples, opts, fusion) -> list[str]:
    recognizer = StreamingRecognizer(model, opts, endpoint_rules=None, fusion=fusion)
    results = []
    for start in range(0, samples.numel(), 1600):
        results += recognizer.accept_waveform(samples[start:start + 1600])
    results += recognizer.finish()
    return [tokenizer.decode(r.tokens) for r in results if r.final]


def test_each_stream_biases_towards_its_own_phrases(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    samples = audio("Mike-test-00002.wav")
    assert final_text(model, tokenizer, samples, options(), None) == ["eight nine three o two nine"]
    biased = options(context_phrases=("three oh two",))  # (a bare "oh" gave "twoh": it matches inside words)
    assert final_text(model, tokenizer, samples, biased, build_fusion(biased, tokenizer)) == [
        "eight nine three oh two nine"]
    with pytest.raises(DecodingOptionError, match="need fusion=build_fusion"):
        StreamingRecognizer(model, biased)


def test_final_result_equals_offline_decoding_with_the_same_fusion(model_and_tokenizer, tmp_path):
    """An LM (its <unk> costly: the out-of-vocabulary "o" goes) and phrases."""
    model, tokenizer = model_and_tokenizer
    samples = audio("Mike-test-00002.wav")
    lm = tmp_path / "digits.arpa"
    lm.write_text("\\data\\\nngram 1=14\n\n\\1-grams:\n-1\t</s>\n-99\t<s>\n-9\t<unk>\n"
                  + "".join(f"-1.1\t{w}\n" for w in DIGITS) + "\n\\end\\\n", encoding="utf-8")
    opts = options(lm_path=str(lm), lm_weight=1.0, word_bonus=2.0, context_phrases=("two nine",),
                   context_graph_score=2.0)
    fusion = build_fusion(opts, tokenizer)
    streamed = final_text(model, tokenizer, samples, opts, fusion)
    feats = StreamingFbank(16000, 80, 25.0, 10.0).accept(samples).unsqueeze(0)
    offline = decode(model, feats, torch.tensor([feats.size(1)]),
                     DecodingOptions(**{**opts.__dict__, "simulate_streaming": True}), fusion)
    assert streamed == [tokenizer.decode(offline["attention_rescoring"][0])] == ["eight nine three two nine"]
