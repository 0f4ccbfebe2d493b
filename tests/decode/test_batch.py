"""``decode`` (asrkit.decode.batch): all four modes from one encoder pass, on a tiny model
overfit to real synthesized speech; where WeNet's penalties apply; what the chunk options
hand the encoder."""
from dataclasses import replace

import pytest
import soundfile as sf
import torch
import torchaudio

from asrkit.decode import DecodingOptions, Searcher, decode
from asrkit.decode.modes import runnable_modes
from asrkit.models.cmvn import GlobalCMVN
from tests.models.tiny import tiny_model

MODES = runnable_modes(tiny_model())  # every mode a CTC/attention model has

NUM_UTTS = 3
STEPS = 100


def fbank(path) -> torch.Tensor:
    wav, rate = sf.read(path, dtype="float32")
    return torchaudio.compliance.kaldi.fbank(torch.from_numpy(wav).unsqueeze(0) * 32768, num_mel_bins=40,
                                             sample_frequency=rate, dither=0.0)


def read_kaldi(path) -> dict:
    return dict(line.rstrip("\n").split(" ", 1) for line in open(path, encoding="utf-8") if line.strip())


@pytest.fixture(scope="module")
def overfit(tiny_corpus):
    """A tiny conformer trained on the shortest train utterances until it knows them."""
    split = tiny_corpus.splits["train"]
    texts, wavs = read_kaldi(split.text), read_kaldi(split.wav_scp)
    feats = {k: fbank(wavs[k]) for k in texts}
    keys = sorted(texts, key=lambda k: feats[k].size(0))[:NUM_UTTS]
    chars = sorted(set("".join(texts[k].replace(" ", "▁") for k in keys)))
    units = ["<blank>", "<unk>"] + chars + ["<sos/eos>"]
    index = {u: i for i, u in enumerate(units)}
    targets = [[index[c] for c in texts[k].replace(" ", "▁")] for k in keys]
    stacked = torch.cat([feats[k] for k in keys])
    mean, std = stacked.mean(0), stacked.std(0)
    x = torch.nn.utils.rnn.pad_sequence([(feats[k] - mean) / std for k in keys], batch_first=True)
    x_lengths = torch.tensor([feats[k].size(0) for k in keys])
    y = torch.nn.utils.rnn.pad_sequence([torch.tensor(t) for t in targets], batch_first=True, padding_value=-1)
    y_lengths = torch.tensor([len(t) for t in targets])
    model = tiny_model(input_dim=40, vocab_size=len(units), seed=0,
                       model_conf={"lsm_weight": 0.0, "ctc_weight": 0.5}, decoder_conf={"num_blocks": 1})
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    model.train()
    for _ in range(STEPS):
        loss = model(x, x_lengths, y, y_lengths)["loss"] / NUM_UTTS
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), x, x_lengths, targets


@pytest.mark.slow
def test_overfit_model_decodes_exact_transcripts_in_all_modes(overfit):
    model, x, x_lengths, targets = overfit
    hyps = decode(model, x, x_lengths, DecodingOptions(modes=MODES, beam_size=4, ctc_weight=0.3))
    assert list(hyps) == list(MODES)
    for mode in MODES:
        assert hyps[mode] == targets, mode


def test_hypotheses_same_alone_and_in_padded_batch(overfit):
    model, x, x_lengths, _ = overfit
    batch = decode(model, x, x_lengths, DecodingOptions(modes=MODES, beam_size=4))
    for b, n in enumerate(x_lengths.tolist()):
        alone = decode(model, x[b:b + 1, :n], x_lengths[b:b + 1], DecodingOptions(modes=MODES, beam_size=4))
        for mode in MODES:
            assert alone[mode][0] == batch[mode][b], mode


def test_random_model_hypotheses_same_alone_and_in_batch():
    model = tiny_model(vocab_size=9, seed=2, encoder_conf={"cnn_module_norm": "batch_norm"}).eval()
    with torch.no_grad():
        model.decoder.output_layer.bias[model.eos] += 2.0  # keep attention hypotheses short
    g = torch.Generator().manual_seed(0)
    lengths = [50, 37, 29]
    x = torch.randn(3, 50, 20, generator=g)
    options = DecodingOptions(modes=MODES, beam_size=3, ctc_weight=0.5)
    batch = decode(model, x, torch.tensor(lengths), options)
    for b, n in enumerate(lengths):
        alone = decode(model, x[b:b + 1, :n], torch.tensor([n]), options)
        for mode in MODES:
            assert alone[mode][0] == batch[mode][b], mode


def test_modes_are_checked():
    model = tiny_model(model_conf={"ctc_weight": 1.0}).eval()
    x, lengths = torch.randn(1, 30, 20), torch.tensor([30])
    with pytest.raises(ValueError, match="unknown decoding mode"):
        decode(model, x, lengths, DecodingOptions(modes=["beam"]))
    with pytest.raises(ValueError, match="mode attention needs an attention decoder; this model has none"):
        decode(model, x, lengths, DecodingOptions(modes=["attention"]))
    assert list(decode(model, x, lengths, DecodingOptions(modes=["ctc_greedy_search"]))) == ["ctc_greedy_search"]


# ------------------------------------------------------------------ penalties


def penalised_model():
    model = tiny_model(vocab_size=9, seed=2, encoder_conf={"cnn_module_norm": "batch_norm"}).eval()
    with torch.no_grad():
        model.decoder.output_layer.bias[model.eos] += 1.0
        model.ctc.ctc_lo.bias[0] += 1.0  # blank-heavy: the penalty has something to change
    return model


def test_blank_penalty_reaches_every_ctc_search_and_the_rescoring_scores_only():
    """decode(blank_penalty=P) equals the searches run by hand on log-posteriors whose
    blank logit is lowered by P; ``attention`` does not change."""
    model = penalised_model()
    x, lengths = torch.randn(3, 50, 20, generator=torch.Generator().manual_seed(1)), torch.tensor([50, 37, 29])
    penalty = 2.0
    plain = DecodingOptions(modes=MODES, beam_size=3, ctc_weight=0.5)
    got = decode(model, x, lengths, replace(plain, blank_penalty=penalty))
    plain = decode(model, x, lengths, plain)
    searcher = Searcher.of_model(model)
    with torch.no_grad():
        enc, enc_lengths = model.encode(x, lengths)
        logits = model.ctc.ctc_lo(enc)
        logits[:, :, model.blank_id] -= penalty
        log_probs = torch.log_softmax(logits, -1)
        nbest, scores = searcher.ctc_nbest(log_probs, enc_lengths, 3)
        rescored, _ = searcher.attention_rescoring(enc, enc_lengths, nbest, scores, 0.5, 0.0)
    assert got["ctc_greedy_search"] == searcher.ctc_greedy(log_probs, enc_lengths)
    assert got["ctc_prefix_beam_search"] == [h[0] for h in nbest]
    assert got["attention_rescoring"] == rescored
    assert got["attention"] == plain["attention"]
    assert got["ctc_greedy_search"] != plain["ctc_greedy_search"]
    blank_frames = lambda lp: int((lp.argmax(-1) == model.blank_id).sum())  # noqa: E731
    assert blank_frames(log_probs) < blank_frames(model.ctc_log_probs(enc))


def test_length_penalty_reaches_the_attention_mode_only():
    model = penalised_model()
    x, lengths = torch.randn(3, 50, 20, generator=torch.Generator().manual_seed(1)), torch.tensor([50, 37, 29])
    got = decode(model, x, lengths, DecodingOptions(modes=MODES, beam_size=4, length_penalty=1.0))
    plain = decode(model, x, lengths, DecodingOptions(modes=MODES, beam_size=4))
    with torch.no_grad():
        enc, enc_lengths = model.encode(x, lengths)
        expected, _ = Searcher.of_model(model).attention_beam(enc, enc_lengths, 4, 1.0)
    assert got["attention"] == expected
    for mode in ("ctc_greedy_search", "ctc_prefix_beam_search", "attention_rescoring"):
        assert got[mode] == plain[mode], mode


# ------------------------------------------------------------------ chunked encoder output
# The chunked encoder (model.encode(..., chunk_size, num_left_chunks) and
# encoder.forward_chunk_by_chunk) is the encoder's business and tested there; these tests
# check what decode hands it and how it uses what comes back, with stand-ins that record
# their arguments and return the full-context output.


def recording_encode(monkeypatch, model):
    calls = []
    full = model.encode

    def encode(feats, feats_lengths, **chunking):
        calls.append(chunking)
        return full(feats, feats_lengths)
    monkeypatch.setattr(model, "encode", encode)
    return calls


def test_chunk_size_reaches_the_masked_encoder_forward(monkeypatch):
    model = penalised_model()
    x, lengths = torch.randn(2, 40, 20, generator=torch.Generator().manual_seed(3)), torch.tensor([40, 26])
    expected = decode(model, x, lengths, DecodingOptions(modes=MODES, beam_size=3))
    calls = recording_encode(monkeypatch, model)
    options = DecodingOptions(modes=MODES, beam_size=3)
    assert decode(model, x, lengths, replace(options, decoding_chunk_size=4, num_decoding_left_chunks=2)) == expected
    assert decode(model, x, lengths, replace(options, decoding_chunk_size=16)) == expected
    for full_context in (0, -1):  # full context: the plain forward, left chunks ignored
        assert decode(model, x, lengths, replace(options, decoding_chunk_size=full_context,
                                                 num_decoding_left_chunks=3)) == expected
    assert calls == [{"chunk_size": 4, "num_left_chunks": 2}, {"chunk_size": 16, "num_left_chunks": -1}, {}, {}]


def test_simulate_streaming_runs_each_utterance_alone_through_forward_chunk_by_chunk(monkeypatch):
    """One call per utterance with its frames only, CMVN applied, chunk and left chunks
    as given; the outputs are padded back into a batch that decodes like the full one."""
    model = penalised_model()
    g = torch.Generator().manual_seed(4)
    model.cmvn = GlobalCMVN(torch.randn(20, generator=g), torch.rand(20, generator=g) + 0.5)
    lengths = torch.tensor([31, 48, 22])
    x = torch.randn(3, 48, 20, generator=g)
    expected = decode(model, x, lengths, DecodingOptions(modes=MODES, beam_size=3))
    calls = []

    def forward_chunk_by_chunk(xs, decoding_chunk_size, num_decoding_left_chunks):
        calls.append((xs.clone(), decoding_chunk_size, num_decoding_left_chunks))
        return model.encoder(xs, torch.tensor([xs.size(1)]))
    monkeypatch.setattr(model.encoder, "forward_chunk_by_chunk", forward_chunk_by_chunk, raising=False)
    encode_calls = recording_encode(monkeypatch, model)
    got = decode(model, x, lengths, DecodingOptions(modes=MODES, beam_size=3, decoding_chunk_size=8,
                                                    num_decoding_left_chunks=1, simulate_streaming=True))
    assert got == expected
    assert encode_calls == []  # (the batch forward is not used)
    assert [(c[1], c[2]) for c in calls] == [(8, 1)] * 3
    for (xs, _, _), b in zip(calls, range(3)):
        n = int(lengths[b])
        assert xs.shape == (1, n, 20)
        torch.testing.assert_close(xs, model.cmvn(x[b:b + 1, :n]))
