"""The transducer searches' own properties (``asrkit/decode/transducer_search.py``), on WeNet's
reference models (the stateless ``embedding`` predictor and the LSTM one, whose (h, c) state
the searches carry from one fed piece to the next): feeding the encoder output chunk by chunk
gives what feeding it at once gives (the streaming recognizer relies on it), modified beam
search with beam 1 is greedy search with one symbol per frame, emission frames are in order
and inside the utterance."""
from __future__ import annotations

import pytest
import torch

from asrkit.decode.transducer_search import (ModifiedBeamSearch, TransducerGreedySearch,
                                             TransducerPrefixBeamSearch, TransducerSearcher, log_add)
from tests.models.transducer.wenet_transducer import load_reference, load_wenet_transducer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=["rnnt_stateless_u2pp", "rnnt_offline"])
def model_and_frames(request):
    model = load_wenet_transducer(request.param)
    ref = load_reference(request.param)
    utt = max(ref["utts"], key=lambda u: u["feats"].size(0))
    with torch.inference_mode():
        enc, _ = model.encode(utt["feats"].unsqueeze(0), torch.tensor([utt["feats"].size(0)]))
        return model, enc[0], model.ctc_log_probs(enc)[0]


def _searches(model, enc):
    args = (TransducerSearcher.of_model(model), enc.device)
    return {"greedy": lambda: TransducerGreedySearch(*args),
            "prefix": lambda: TransducerPrefixBeamSearch(*args, beam_size=4),
            "modified": lambda: ModifiedBeamSearch(*args, beam_size=4)}


def _feed(search, enc, ctc, pieces):
    start = 0
    for size in pieces:
        if isinstance(search, TransducerPrefixBeamSearch):
            search.feed(enc[start:start + size], ctc[start:start + size])
        else:
            search.feed(enc[start:start + size])
        start += size


@pytest.mark.parametrize("kind", ["greedy", "prefix", "modified"])
def test_chunk_by_chunk_equals_at_once(model_and_frames, kind):
    model, enc, ctc = model_and_frames
    make = _searches(model, enc)[kind]
    whole, chunks = make(), make()
    with torch.inference_mode():
        _feed(whole, enc, ctc, [enc.size(0)])
        _feed(chunks, enc, ctc, [4, 1, 7, enc.size(0) - 12])
    a, b = whole.best(), chunks.best()
    assert a.tokens and a.tokens == b.tokens and a.frames == b.frames and a.score == pytest.approx(b.score)
    assert a.frames == sorted(a.frames) and 0 <= a.frames[0] and a.frames[-1] < enc.size(0)


def test_modified_beam_search_with_beam_1_is_greedy_with_one_symbol_per_frame(model_and_frames):
    model, enc, _ = model_and_frames
    greedy = TransducerGreedySearch(TransducerSearcher.of_model(model), enc.device, max_symbols_per_frame=1)
    beam = ModifiedBeamSearch(TransducerSearcher.of_model(model), enc.device, beam_size=1)
    with torch.inference_mode():
        greedy.feed(enc)
        beam.feed(enc)
    assert beam.best().tokens == greedy.best().tokens and len(set(greedy.best().frames)) == len(greedy.best().frames)


def test_log_add_and_bad_arguments(model_and_frames):
    assert log_add(-float("inf"), -1.0) == -1.0 and log_add(0.0, 0.0) == pytest.approx(0.6931471805599453)
    model, enc, _ = model_and_frames
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        TransducerPrefixBeamSearch(TransducerSearcher.of_model(model), enc.device, beam_size=0)
    search = TransducerPrefixBeamSearch(TransducerSearcher.of_model(model), enc.device, beam_size=2, ctc_weight=0.3)
    with pytest.raises(ValueError, match="needs the CTC log-probabilities"):
        search.feed(enc)
