"""A recording of known utterances with short pauses transcribes as well as the utterances
one by one -- the target of docs/transcribe.md ("Long recordings"), in a version that runs
in CI: 96 utterances of the digits test split (test-split voices, synthesized by espeak-ng)
joined with 0.2-0.5 s pauses (about four minutes), decoded with the default segmentation by
the default recipe's U2++ model (``tests/fixtures/asrkit_digits/u2pp``: ``bash run.sh
--streaming true``'s ``avg_3.pt``, weights stored in fp16), against each utterance decoded
alone and whole.  Decoded without the detector the same file is far off.  (The offline
model is measured by ``bench/transcribe_long.py``: on samples this small its difference
swings by +-0.7 points with the pauses drawn, docs/transcribe.md.)"""
from __future__ import annotations

import pytest
import soundfile as sf

from asrkit.transcribe import Segmentation, load_model
from bench.transcribe_long import build_file, error_rates, synthesize_utterances
from tests.helpers import REPO

MODEL = REPO / "tests" / "fixtures" / "asrkit_digits" / "u2pp"


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    utts = synthesize_utterances(96, seed=5, work=tmp_path_factory.mktemp("utts"))
    samples = [sf.read(u["wav"], dtype="float32")[0] for u in utts]
    seconds = sum(x.size for x in samples) / 16000 + 0.35 * len(samples)  # about each utterance once
    audio, order = build_file(samples, seconds, (0.2, 0.5), seed=1)
    assert len(order) >= 90 and order[:90] == list(range(90))
    return audio, [samples[i] for i in order], [utts[i]["text"] for i in order]


def test_joined_with_short_pauses_within_half_a_point_of_one_by_one(joined):
    audio, samples, refs = joined
    model = load_model(MODEL)
    one_by_one = [model.transcribe(x, 16000, segmentation=Segmentation.whole()).text for x in samples]
    result = model.transcribe(audio, 16000)
    cer, _ = error_rates(refs, [result.text])
    alone_cer, _ = error_rates(refs, one_by_one)
    assert alone_cer < 3.0  # (the model is the recipe's: about its test-set CER)
    assert cer <= alone_cer + 0.5, (cer, alone_cer)
    assert len(result.segments) >= len(refs)  # a cut in every pause between utterances
    whole, _ = error_rates(refs, [model.transcribe(audio, 16000, segmentation=Segmentation(vad=False)).text])
    assert whole > cer + 3.0, whole  # in 20 s pieces, across pauses and mid-word: what the detector avoids


def test_bf16_decoding_gives_the_fp32_text(joined):
    """``dtype="bf16"`` runs the model passes under autocast (CTC scores stay fp32): on this
    model and these utterances the text is fp32's (bf16's 8 significant bits change scores
    by ~0.4 %, too little to reorder hypotheses that are not near ties)."""
    from asrkit.decode import DecodingOptionError
    _, samples, _ = joined
    model = load_model(MODEL)
    for mode in ("ctc_greedy_search", "attention_rescoring"):
        for x in samples[:6]:
            assert model.transcribe(x, 16000, mode=mode, dtype="bf16").text == model.transcribe(x, 16000, mode=mode).text
    with pytest.raises(DecodingOptionError, match="dtype must be one of fp32, bf16, fp16, got 'fp8'"):
        model.transcribe(samples[0], 16000, dtype="fp8")
