"""``asrkit serve`` spoken to by a WeNet-protocol client written from the protocol
(``tools/wenet_client.py``, which imports nothing of ``asrkit``):

* a chunk-trained model: ``server_ready``, partial results while the audio streams, one
  ``final_result`` whose ``nbest`` is a JSON string with the text asrkit's own streaming
  recognizer gives for the same audio and settings, word pieces in milliseconds inside the
  audio, ``speech_end``, the connection closed;
* ``continuous_decoding`` false: the first endpoint ends the stream; true: one final per
  utterance;
* a full-context model: the segment decoded whole, the text ``transcribe`` gives for it;
  with ``nbest`` 3 the decoding mode's own n-best (attention rescoring's ranked beam), the
  nbest-1 result first;
* silence and non-speech give no text (``transcribe`` gives none for them either): digital
  zeros and noise through a full-context model (which decodes them whole into words), a
  tone after an utterance through a chunk model (whose own recognizer makes words of it) --
  finals empty, no partial results -- while the utterance's final is the recognizer's;
* per-stream phrases (``context``), refused when the model's units cannot spell them;
* HTTP on the same port: the page, ``/info``, a file POSTed to ``/transcribe`` giving
  ``transcribe``'s JSON, an upload that is not audio or too large refused; a POST in
  ``Transfer-Encoding: chunked`` decoded as the same file with ``Content-Length``, bodies it
  cannot read answered at once with a one-line error."""
from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch

from asrkit.data.audio import resample
from asrkit.decode.shared import SharedOutputs
from asrkit.serve import ServedModel
from asrkit.transcribe import Segmentation
from asrkit.transcribe.segments import speech_regions_16k
from tests.helpers import REPO, connected_takes, fsdd_takes
from tests.serve.serve_helpers import ServerThread, alone, with_silence
from tools.wenet_client import stream

pytestmark = pytest.mark.usefixtures("threads_back")


@pytest.fixture(scope="module")
def chunk_server(chunk_model):
    from asrkit.serve import ServedModel, ServerLimits
    server = ServerThread(ServedModel(chunk_model), limits=ServerLimits(max_upload_bytes=1 << 20))
    yield server
    server.close()


@pytest.fixture(scope="module")
def real_model():
    from asrkit.transcribe import load_model
    return load_model(REPO / "tests" / "fixtures" / "asrkit_digits" / "mixed_real")


@pytest.fixture(scope="module")
def real_server(real_model):
    server = ServerThread(ServedModel(real_model))
    yield server
    server.close()


@pytest.fixture(scope="module")
def full_server(full_model):
    from asrkit.serve import ServedModel
    server = ServerThread(ServedModel(full_model))
    yield server
    server.close()


def test_a_stream_gives_the_recognizers_text_with_partials_and_word_pieces(chunk_server, chunk_model, utterances):
    pcm = with_silence(utterances[0][1])
    s = asyncio.run(stream(chunk_server.url, pcm.tobytes()))
    types = [r.type for r in s.replies]
    assert types[0] == "server_ready" and types[-1] == "speech_end", types
    assert types.count("final_result") == 1 and types.index("final_result") == len(types) - 2
    partials = s.of_type("partial_result")
    assert partials and all(isinstance(r.message["nbest"], str) for r in partials)
    assert all(r.message["status"] == "ok" for r in s.replies)
    final = s.of_type("final_result")[0]
    assert final.sentences() == [alone(chunk_model, pcm)[0]] and final.sentences()[0]
    pieces = final.word_pieces()
    assert [p["word"] for p in pieces] == final.sentences()[0].split()
    duration_ms = len(pcm) / 16
    assert all(isinstance(p["start"], int) and 0 <= p["start"] < p["end"] <= duration_ms for p in pieces)
    assert [p["start"] for p in pieces] == sorted(p["start"] for p in pieces)
    assert s.close_code == 1000


def test_nbest_hypotheses_best_first(chunk_server, chunk_model, utterances):
    pcm = with_silence(utterances[11][1])
    s = asyncio.run(stream(chunk_server.url, pcm.tobytes(), start={"signal": "start", "nbest": 3}))
    final = s.of_type("final_result")[0]
    entries = json.loads(final.message["nbest"])
    assert len(entries) == 3 and entries[0]["sentence"] == alone(chunk_model, pcm)[0]
    assert len({e["sentence"] for e in entries}) == 3
    assert all([p["word"] for p in e["word_pieces"]] == e["sentence"].split() for e in entries)
    assert all(1 <= len(r.sentences()) <= 3 for r in s.of_type("partial_result"))
    assert max(len(r.sentences()) for r in s.of_type("partial_result")) > 1


def speech_span(pcm: np.ndarray) -> np.ndarray:
    """What a segment session decodes of a 16 kHz segment: its first speech region's start to
    its last one's end, padded as ``transcribe`` pads a part (the non-speech around is left out)."""
    regions = speech_regions_16k(pcm.astype(np.float32) / 32768.0, Segmentation())
    return pcm[regions[0][0]:regions[-1][1]]


def rescored_nbest(model, pcm: np.ndarray, n: int) -> list[str]:
    """attention_rescoring's own n-best texts for ``pcm`` decoded whole, computed here: the CTC
    prefix-beam n-best ranked by decoder score + ctc_weight x CTC score (the server's options)."""
    b = model.backend
    options = ServedModel(model).options
    feats = model.features(torch.from_numpy(pcm.astype(np.float32) / 32768.0)).unsqueeze(0)
    with torch.inference_mode():
        enc, lengths = b.encode(feats, torch.tensor([feats.size(1)]), options)
        shared = SharedOutputs.from_options(b.searcher, enc, lengths, options)
        hyps, ctc = shared.nbest()
        decoder = b.searcher.rescoring_scores(enc, lengths, hyps, options.reverse_weight)
    totals = [d + options.ctc_weight * c for d, c in zip(decoder[0], ctc[0])]
    ranked = sorted(range(len(totals)), key=lambda i: -totals[i])
    return [b.text(hyps[0][i]) for i in ranked[:n]]


def test_a_full_context_model_gives_its_modes_nbest(full_server, full_model, utterances):
    pcm = with_silence(utterances[11][1], after_s=0.2)  # (no endpoint: the end finalises the whole audio)
    one = asyncio.run(stream(full_server.url, pcm.tobytes(), piece_bytes=16000))
    three = asyncio.run(stream(full_server.url, pcm.tobytes(), piece_bytes=16000,
                               start={"signal": "start", "nbest": 3}))
    best, entries = one.of_type("final_result")[0], json.loads(three.of_type("final_result")[0].message["nbest"])
    assert len(best.sentences()) == 1 and 1 <= len(entries) <= 3
    assert entries[0] == json.loads(best.message["nbest"])[0]  # (the nbest-1 result: text and word pieces)
    sentences = [e["sentence"] for e in entries]
    assert len(set(sentences)) == len(sentences) == 3
    assert sentences == rescored_nbest(full_model, speech_span(pcm), 3)
    assert [p["word"] for p in entries[0]["word_pieces"]] == sentences[0].split()
    assert all(e["word_pieces"] == [] for e in entries[1:])  # (the others: no word times)
    assert all(len(r.sentences()) == 1 for r in three.of_type("partial_result"))  # (partials: the best only)


def test_continuous_decoding_gives_a_final_per_utterance_and_one_shot_ends_at_the_first(
        chunk_server, chunk_model, utterances):
    pcm = np.concatenate([with_silence(utterances[1][1], after_s=1.6), with_silence(utterances[2][1])])
    expected = [t for t in alone(chunk_model, pcm) if t]
    assert len(expected) == 2
    start = {"signal": "start", "nbest": 1, "continuous_decoding": True}
    s = asyncio.run(stream(chunk_server.url, pcm.tobytes(), start=start))
    finals = [r for r in s.of_type("final_result") if r.sentences()[0]]
    assert [r.sentences()[0] for r in finals] == expected
    assert s.replies[-1].type == "speech_end"
    first_ms = len(with_silence(utterances[1][1], after_s=1.6)) / 16  # (word times count from the stream's start)
    assert finals[0].word_pieces()[-1]["end"] <= first_ms <= finals[1].word_pieces()[0]["start"] <= len(pcm) / 16
    one = asyncio.run(stream(chunk_server.url, pcm.tobytes(), piece_bytes=1600))
    assert [r.sentences()[0] for r in one.of_type("final_result")] == expected[:1]
    assert one.replies[-1].type == "speech_end" and one.close_code == 1000


def test_a_full_context_model_decodes_the_segment_whole(full_server, full_model, utterances):
    pcm = with_silence(utterances[3][1], after_s=0.2)  # (too little silence for an endpoint: the end finalises)
    s = asyncio.run(stream(full_server.url, pcm.tobytes(), piece_bytes=4000))
    expected = full_model.transcribe(speech_span(pcm), 16000, segmentation=Segmentation.whole())
    assert 0 < len(speech_span(pcm)) < len(pcm)  # (the silence before and after is not decoded)
    finals = s.of_type("final_result")
    assert [r.sentences()[0] for r in finals] == [expected.text]
    assert [p["word"] for p in finals[0].word_pieces()] == [w.word for w in expected.words]
    assert s.of_type("partial_result"), "partial results from re-decoding the segment so far"
    assert s.replies[-1].type == "speech_end"


def test_a_full_context_model_endpoints_segments_in_a_continuous_stream(full_server, utterances):
    first = with_silence(utterances[9][1], after_s=1.6)
    pcm = np.concatenate([first, with_silence(utterances[10][1])])
    s = asyncio.run(stream(full_server.url, pcm.tobytes(), start={"signal": "start", "continuous_decoding": True}))
    finals = [r for r in s.of_type("final_result") if r.sentences()[0]]
    assert len(finals) == 2, [r.message for r in s.replies]
    assert finals[0].word_pieces()[-1]["end"] <= len(first) / 16 <= finals[1].word_pieces()[0]["start"]
    assert s.replies[-1].type == "speech_end"


def test_phrases_per_stream_and_rates_the_server_does_not_take(chunk_server, utterances):
    pcm = with_silence(utterances[4][1]).tobytes()
    biased = asyncio.run(stream(chunk_server.url, pcm, start={"signal": "start", "context": ["nine", "two"]}))
    assert biased.replies[0].type == "server_ready" and biased.of_type("final_result")
    for start in ({"signal": "start", "context": ["qqq"]}, {"signal": "start", "sample_rate": 4000},
                  {"signal": "start", "sample_rate": 96000}):
        s = asyncio.run(stream(chunk_server.url, pcm, start=start))
        assert [r.message["status"] for r in s.replies] == ["failed"], start
        assert s.close_code is not None
    refused = asyncio.run(stream(chunk_server.url, pcm, start={"signal": "start", "sample_rate": 4000}))
    assert refused.replies[0].message["message"] == ("sample_rate 4000: streams of 8000-48000 Hz are taken "
                                                      "(resampled to this model's 16000 Hz)")


def to_pcm(samples: torch.Tensor) -> np.ndarray:
    return (np.clip(samples.numpy(), -1, 32767 / 32768) * 32768).round().astype(np.int16)


def test_an_8_khz_stream_gives_the_text_of_its_16_khz_copy(chunk_server, chunk_model, utterances):
    """A chunk session resamples an 8 kHz stream piece by piece to the model's 16 kHz: the
    finals of the stream are asrkit's streaming recognizer's on the 8 kHz audio resampled
    whole, and those of its 16 kHz copy."""
    for _, audio in utterances[5:7]:
        x = torch.from_numpy(with_silence(audio).astype(np.float32) / 32768)[None]
        narrow = to_pcm(resample(x, 16000, 8000)[0])
        up = resample(torch.from_numpy(narrow.astype(np.float32) / 32768)[None], 8000, 16000)[0]
        finals = []
        for pcm, rate in ((narrow, 8000), (to_pcm(up), 16000)):
            s = asyncio.run(stream(chunk_server.url, pcm.tobytes(), start={"signal": "start", "sample_rate": rate}))
            assert s.replies[0].type == "server_ready", s.replies[0].message
            finals.append([r.sentences()[0] for r in s.of_type("final_result")])
        assert finals[0] == finals[1] == alone(chunk_model, (up.numpy() * 32768).astype(np.float32)), finals
        assert finals[0][0]


def test_an_8_khz_real_recording_through_a_segment_session(real_server, real_model):
    """A full-context model (the real-speech fixture): an 8 kHz recording of a person (lucas, a
    speaker it never heard) sent at 8 kHz gives the text of its 16 kHz copy and of ``transcribe``."""
    takes = fsdd_takes("lucas", range(1))
    samples = connected_takes([s for _, s, _ in takes[2:6]], gap_s=0.25)
    noise = np.random.default_rng(1).normal(0, 3e-4, samples.shape).astype(np.float32)  # (a microphone's floor)
    narrow = to_pcm(torch.from_numpy(samples + noise))
    up = to_pcm(resample(torch.from_numpy(narrow.astype(np.float32) / 32768)[None], 8000, 16000)[0])
    finals = []
    for pcm, rate in ((narrow, 8000), (up, 16000)):
        s = asyncio.run(stream(real_server.url, pcm.tobytes(), start={"signal": "start", "sample_rate": rate}))
        finals.append([r.sentences()[0] for r in s.of_type("final_result")])
    expected = real_model.transcribe(narrow.astype(np.float32) / 32768, 8000, segmentation=Segmentation.whole()).text
    assert finals[0] == finals[1] == [expected] and expected, finals


def test_the_page_info_and_file_uploads_on_the_same_port(chunk_server, chunk_model, tiny_corpus):
    page = urllib.request.urlopen(chunk_server.http + "/", timeout=30).read().decode()
    assert "AudioWorklet" in page and "u2pp" in page and "<script src" not in page
    info = json.loads(urllib.request.urlopen(chunk_server.http + "/info", timeout=30).read())
    assert info["kind"] == "chunks" and info["num_units"] == len(chunk_model.units)
    wav = sorted(tiny_corpus.splits["test"].dir.rglob("*.wav"))[0]
    request = urllib.request.Request(chunk_server.http + "/transcribe?name=" + wav.name, data=wav.read_bytes(),
                                     method="POST")
    got = json.loads(urllib.request.urlopen(request, timeout=60).read())
    expected = chunk_model.transcribe(str(wav)).to_dict()
    assert got == {"path": wav.name, **expected}
    for body, status in ((b"not audio at all" * 10, 400), (bytes(2 << 20), 413)):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(chunk_server.http + "/transcribe?name=x.wav", data=body,
                                                          method="POST"), timeout=30)
        assert e.value.code == status and "error" in json.loads(e.value.read())


def tone(seconds: float, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    return (8000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def test_silence_and_noise_give_no_text_from_a_full_context_model(full_server, full_model):
    zeros = np.zeros(5 * 16000, np.int16)
    noise = np.random.default_rng(0).normal(0, 300, 6 * 16000).astype(np.int16)
    whole = Segmentation.whole()
    assert full_model.transcribe(zeros, 16000, segmentation=whole).text  # (decoded whole, they make words)
    assert full_model.transcribe(noise, 16000, segmentation=whole).text
    pcm = np.concatenate([zeros, noise])
    start = {"signal": "start", "nbest": 3, "continuous_decoding": True}
    s = asyncio.run(stream(full_server.url, pcm.tobytes(), piece_bytes=32000, start=start))
    finals = s.of_type("final_result")  # (two ended by the rule of 5 s without speech, one by the end)
    assert [r.sentences() for r in finals] == [[""]] * 3 and all(r.word_pieces() == [] for r in finals)
    assert not s.of_type("partial_result") and s.replies[-1].type == "speech_end"
    one = asyncio.run(stream(full_server.url, zeros.tobytes(), piece_bytes=32000))
    assert [(r.type, r.sentences()) for r in one.replies[1:-1]] == [("final_result", [""])]
    assert one.replies[-1].type == "speech_end"


def test_silence_and_tones_give_no_text_from_a_chunk_model(chunk_server, chunk_model, utterances):
    pcm = np.concatenate([with_silence(utterances[1][1], after_s=2.6), tone(2.0)])
    expected = alone(chunk_model, pcm)
    assert len(expected) == 2 and all(expected), expected  # (the recognizer alone makes words of the tone)
    s = asyncio.run(stream(chunk_server.url, pcm.tobytes(), start={"signal": "start", "continuous_decoding": True}))
    finals = s.of_type("final_result")
    assert [r.sentences() for r in finals] == [[expected[0]], [""]] and finals[1].word_pieces() == []
    assert [r.type for r in s.replies[s.replies.index(finals[0]):]] == ["final_result"] * 2 + ["speech_end"]
    zeros = asyncio.run(stream(chunk_server.url, np.zeros(6 * 16000, np.int16).tobytes()))
    assert [(r.type, r.sentences()) for r in zeros.replies[1:-1]] == [("final_result", [""])]
    assert zeros.replies[-1].type == "speech_end"


def raw_http(port: int, request: bytes) -> tuple[int, dict]:
    """``request`` sent whole to 127.0.0.1:``port`` from a plain socket: the reply's status
    and JSON body (read to the server's end of the connection, 30 s at most)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        reply = b""
        while data := sock.recv(1 << 16):
            reply += data
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), reply[:200]
    return int(head.split(b" ", 2)[1]), json.loads(body)


def chunked(data: bytes, size: int) -> bytes:
    """``data`` in Transfer-Encoding: chunked (chunks of ``size`` bytes, a chunk extension
    on each, a trailer field)."""
    chunks = [data[i:i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x;n=%d\r\n%s\r\n" % (len(c), i, c) for i, c in enumerate(chunks)) + b"0\r\nX-Sum: 0\r\n\r\n"


def test_a_chunked_upload_is_transcribed_and_bodies_it_cannot_read_get_an_error_at_once(chunk_server, tiny_corpus):
    port = chunk_server.server.port
    wav = sorted(tiny_corpus.splits["test"].dir.rglob("*.wav"))[1]
    head = b"POST /transcribe?name=%s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % wav.name.encode()
    data = wav.read_bytes()
    plain = raw_http(port, head + b"Content-Length: %d\r\n\r\n" % len(data) + data)
    assert plain[0] == 200 and plain[1]["text"]
    assert raw_http(port, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(data, 4000)) == plain
    for request, status in ((b"Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked(data, 4000), 501),
                            (b"Transfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n" + chunked(data, 4000), 400),
                            (b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400),
                            (b"Transfer-Encoding: chunked\r\n\r\n" + chunked(bytes(2 << 20), 1 << 16), 413)):
        got = raw_http(port, head + request)
        assert got[0] == status and "\n" not in got[1]["error"], (request[:60], got)
