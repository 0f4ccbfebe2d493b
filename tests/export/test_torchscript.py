"""The scripted model (asrkit.export.torchscript) against eager asrkit: encoder outputs
within 1e-5 and identical hypotheses for ctc_greedy_search, ctc_prefix_beam_search and
attention_rescoring -- random models, a model briefly trained on real speech, synthetic
CTC posteriors with ties and blank-dominated frames, and the saved-file round trip."""
import contextlib
import random
import json
import warnings

import pytest
import soundfile as sf
import torch
import torchaudio

from asrkit.decode import DecodingOptions, decode, rescoring_scores
from asrkit.decode.ctc_search import Hypothesis, ctc_prefix_beam_search
from asrkit.export import ExportCheckError, check_against_eager, export_model, load_exported, script_model
from tests.models.tiny import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


FEAT = dict(sample_rate=16000, num_mel_bins=20, frame_length=25.0, frame_shift=10.0)
MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention_rescoring"]


def units_for(vocab: int) -> list[str]:
    return ["<blank>", "<unk>"] + [chr(ord("a") + i) for i in range(vocab - 3)] + ["<sos/eos>"]


def batch(lengths, dim=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), max(lengths), dim, generator=g)
    for b, n in enumerate(lengths):
        x[b, n:] = 0.0
    return x, torch.tensor(lengths)


def assert_same(model, scripted, x, lengths, **kw):
    """Every mode of the scripted module equals eager decode(); encoder within 1e-5."""
    modes = [m for m in MODES if m != "attention_rescoring" or model.decoder is not None]
    expected = decode(model, x, lengths, DecodingOptions(modes=modes, **kw))
    beam, cw = kw.get("beam_size", 10), kw.get("ctc_weight", 0.3)
    rw, thr = kw.get("reverse_weight", 0.0), kw.get("blank_skip_threshold", 0.999)
    with torch.no_grad():
        got = scripted.decode(x, lengths, beam_size=beam, ctc_weight=cw, reverse_weight=rw, blank_skip_threshold=thr)
        assert got == expected
        assert scripted.ctc_greedy_search(x, lengths) == expected["ctc_greedy_search"]
        assert scripted.ctc_prefix_beam_search(x, lengths, beam, thr) == expected["ctc_prefix_beam_search"]
        if model.decoder is not None:
            assert scripted.attention_rescoring(x, lengths, beam, cw, rw, thr) == expected["attention_rescoring"]
        enc, enc_lengths = model.encode(x, lengths)
        s_enc, s_lengths = scripted(x, lengths)
    assert torch.equal(s_lengths, enc_lengths)
    for b, n in enumerate(enc_lengths.tolist()):
        torch.testing.assert_close(s_enc[b, :n], enc[b, :n], atol=1e-5, rtol=0)
    return expected


@pytest.mark.parametrize("kind", ["conformer", "transformer_bidirectional", "ctc_only"])
def test_random_models_match_eager(kind):
    if kind == "conformer":
        model = tiny_model(vocab_size=9, seed=1, encoder_conf={"cnn_module_norm": "batch_norm"})
        settings = [dict(beam_size=3, ctc_weight=0.5), dict(beam_size=1), dict(beam_size=12)]  # 12 > V
    elif kind == "transformer_bidirectional":
        model = tiny_model(vocab_size=9, seed=2, encoder="transformer", decoder="bitransformer",
                           decoder_conf={"r_num_blocks": 1}, model_conf={"reverse_weight": 0.3})
        settings = [dict(beam_size=4, reverse_weight=0.3), dict(beam_size=4, reverse_weight=0.0)]
    else:
        model = tiny_model(vocab_size=9, seed=3, model_conf={"ctc_weight": 1.0})
        settings = [dict(beam_size=4)]
    model.eval()
    if model.decoder is not None:
        with torch.no_grad():
            model.ctc.ctc_lo.bias[0] -= 1.0  # more non-blank frames: longer n-best lists to rescore
    scripted = script_model(model, units_for(9), **FEAT)
    x, lengths = batch([61, 45, 30, 17], seed=4)
    for kw in settings:
        expected = assert_same(model, scripted, x, lengths, **kw)
        assert any(expected["ctc_greedy_search"])
    assert scripted.is_bidirectional_decoder() == (kind == "transformer_bidirectional")
    assert scripted.has_decoder() == (kind != "ctc_only")
    if kind == "ctc_only":
        assert "attention_rescoring" not in scripted.decode(x, lengths, beam_size=4)
        with pytest.raises(Exception, match="needs an attention decoder"):
            scripted.attention_rescoring(x, lengths, 4, 0.3, 0.0, 0.999)
    else:
        with pytest.raises(Exception, match="bitransformer") if kind == "conformer" else contextlib.nullcontext():
            scripted.attention_rescoring(x, lengths, 4, 0.3, 0.3, 0.999)


def test_wenet_penalties_match_eager():
    """length_penalty and blank_penalty through the scripted decode and per-mode methods
    give eager decode()'s hypotheses (the same search code), and do change them here."""
    model = tiny_model(vocab_size=9, seed=1, encoder_conf={"cnn_module_norm": "batch_norm"}).eval()
    with torch.no_grad():
        model.ctc.ctc_lo.bias[0] += 1.0
        model.decoder.output_layer.bias[model.eos] += 1.0
    scripted = script_model(model, units_for(9), **FEAT)
    x, lengths = batch([61, 45, 30], seed=5)
    modes = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]
    plain = decode(model, x, lengths, DecodingOptions(modes=modes, beam_size=4))
    for lp, bp in ((1.5, 0.0), (0.0, 2.0)):
        expected = decode(model, x, lengths, DecodingOptions(modes=modes, beam_size=4, length_penalty=lp,
                                                             blank_penalty=bp))
        with torch.no_grad():
            got = scripted.decode(x, lengths, beam_size=4, modes=modes, length_penalty=lp, blank_penalty=bp)
            assert got == expected
            assert scripted.attention(x, lengths, 4, lp) == expected["attention"]
            assert scripted.ctc_greedy_search(x, lengths, bp) == expected["ctc_greedy_search"]
            assert scripted.ctc_prefix_beam_search(x, lengths, 4, 0.999, bp) == expected["ctc_prefix_beam_search"]
            assert scripted.attention_rescoring(x, lengths, 4, 0.3, 0.0, 0.999, bp) == expected["attention_rescoring"]
        changed = ["attention"] if lp else ["ctc_greedy_search", "ctc_prefix_beam_search"]
        assert all(expected[m] != plain[m] for m in changed), (lp, bp)


def test_prefix_beam_search_equals_eager_on_synthetic_posteriors():
    """Exact n-best lists and scores (doubles), with exact ties (rounded logits),
    blank-dominated frames, every skip threshold, beams wider than the vocabulary."""
    vocab = 7
    scripted = script_model(tiny_model(vocab_size=vocab), units_for(vocab), **FEAT)
    g = torch.Generator().manual_seed(0)
    hyps_seen = 0
    for trial in range(120):
        t = int(torch.randint(1, 30, (1,), generator=g))
        logits = torch.randn(3, t, vocab, generator=g) * float(torch.rand(1, generator=g) * 6)
        if trial % 3 == 0:
            logits = logits.round()  # equal scores: order of first appearance must be kept
        if trial % 2 == 0:
            logits[:, :, 0] += 9.0 * (torch.rand(3, t, generator=g) > 0.5)  # P(blank) > 0.999 frames
        log_probs = torch.log_softmax(logits, -1)
        lengths = torch.randint(0, t + 1, (3,), generator=g)
        lengths[0] = t
        beam = int(torch.randint(1, 10, (1,), generator=g))
        threshold = [0.999, 1.0, 0.9, 0.0][trial % 4]
        expected = ctc_prefix_beam_search(log_probs, lengths, beam, 0, threshold)
        got_hyps, got_scores = scripted.ctc_prefix_beam_search_nbest(log_probs, lengths, beam, threshold)
        for b in range(3):
            assert got_hyps[b] == [list(h.tokens) for h in expected[b]], (trial, b)
            assert got_scores[b] == [h.score for h in expected[b]], (trial, b)
            hyps_seen += len(got_hyps[b])
    assert hyps_seen > 500


def test_forward_attention_decoder_gives_the_rescoring_scores():
    """WeNet's interface (one utterance, hyps with <sos>) reproduces the eager decoder
    scores of attention rescoring, both directions."""
    model = tiny_model(vocab_size=9, seed=5, decoder="bitransformer", decoder_conf={"r_num_blocks": 1},
                       model_conf={"reverse_weight": 0.4}).eval()
    scripted = script_model(model, units_for(9), **FEAT)
    x, lengths = batch([40])
    hyps = [[3, 4, 5], [6], [], [2, 7, 7, 3]]
    with torch.no_grad():
        enc, enc_lengths = model.encode(x, lengths)
        expected = rescoring_scores(model.decoder, enc, enc_lengths, [[Hypothesis(tuple(h), 0.0) for h in hyps]],
                                    [model.sos], model.eos, 0.4)[0]
        width = max(map(len, hyps)) + 1
        ys = torch.full((len(hyps), width), model.eos, dtype=torch.long)
        for i, h in enumerate(hyps):
            ys[i, 0] = model.sos
            ys[i, 1:len(h) + 1] = torch.tensor(h, dtype=torch.long)
        ys_lens = torch.tensor([len(h) + 1 for h in hyps])
        logp, r_logp = scripted.forward_attention_decoder(ys, ys_lens, enc, 0.4)
    for i, h in enumerate(hyps):
        left = sum(float(logp[i, j, tok]) for j, tok in enumerate(h + [model.eos]))
        right = sum(float(r_logp[i, j, tok]) for j, tok in enumerate(h[::-1] + [model.eos]))
        assert 0.6 * left + 0.4 * right == pytest.approx(expected[i], abs=1e-4)


@pytest.fixture(scope="module")
def trained(tiny_corpus):
    """A tiny conformer trained briefly on real synthesized speech: peaky CTC posteriors
    with blank-dominated frames (the blank-skip rule), non-trivial n-best lists."""
    split = tiny_corpus.splits["train"]
    texts = dict(line.rstrip("\n").split(" ", 1) for line in open(split.text, encoding="utf-8"))
    wavs = dict(line.split() for line in open(split.wav_scp, encoding="utf-8"))
    feats = {}
    for key in texts:
        wav, rate = sf.read(wavs[key], dtype="float32")
        feats[key] = torchaudio.compliance.kaldi.fbank(torch.from_numpy(wav).unsqueeze(0) * 32768,
                                                       num_mel_bins=20, sample_frequency=rate, dither=0.0)
    keys = sorted(texts, key=lambda k: feats[k].size(0))[:4]
    units = ["<blank>", "<unk>"] + sorted(set("".join(texts[k].replace(" ", "▁") for k in keys))) + ["<sos/eos>"]
    index = {u: i for i, u in enumerate(units)}
    stacked = torch.cat([feats[k] for k in keys])
    mean, std = stacked.mean(0), stacked.std(0)
    x = torch.nn.utils.rnn.pad_sequence([(feats[k] - mean) / std for k in keys], batch_first=True)
    x_lengths = torch.tensor([feats[k].size(0) for k in keys])
    targets = [[index[c] for c in texts[k].replace(" ", "▁")] for k in keys]
    y = torch.nn.utils.rnn.pad_sequence([torch.tensor(t) for t in targets], batch_first=True, padding_value=-1)
    model = tiny_model(input_dim=20, vocab_size=len(units), seed=0, encoder_conf={"cnn_module_norm": "layer_norm"},
                       decoder_conf={"num_blocks": 1}, model_conf={"lsm_weight": 0.0, "ctc_weight": 0.5})
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    model.train()
    for _ in range(100):
        loss = model(x, x_lengths, y, torch.tensor([len(t) for t in targets]))["loss"] / len(keys)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), units, x, x_lengths


def test_trained_model_matches_eager(trained):
    model, units, x, x_lengths = trained
    with torch.no_grad():
        enc, enc_lengths = model.encode(x, x_lengths)
        p_blank = model.ctc_log_probs(enc)[..., 0].exp()
    valid = torch.arange(enc.size(1)) < enc_lengths.unsqueeze(1)
    assert bool((p_blank[valid] > 0.99).any())  # the blank-skip rule is exercised at 0.99
    scripted = script_model(model, units, **FEAT)
    for kw in (dict(beam_size=4, ctc_weight=0.3), dict(beam_size=10, ctc_weight=0.5, blank_skip_threshold=0.99),
               dict(beam_size=3, blank_skip_threshold=1.0)):
        expected = assert_same(model, scripted, x, x_lengths, **kw)
        assert all(expected["attention_rescoring"])


def test_saved_archive_round_trip(tmp_path):
    model = tiny_model(vocab_size=9, seed=6).eval()
    units = units_for(9)
    cmvn = (torch.linspace(-1.0, 1.0, 20), torch.linspace(0.5, 2.0, 20))
    out = tmp_path / "final.zip"
    summary = export_model(model, units, out, feature_cmvn=cmvn, config_text="encoder: conformer\n", **FEAT)
    assert summary["max_abs_diff"] <= 1e-5 and summary["modes"] == MODES
    assert not [p for p in tmp_path.iterdir() if p.name != "final.zip"]  # no temporary left behind
    loaded, extra = load_exported(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit deprecation notice
        plain = torch.jit.load(str(out))  # what a runtime does
    assert extra["train.yaml"] == "encoder: conformer\n"
    assert extra["units.txt"].splitlines()[0] == "<blank> 0" and len(extra["units.txt"].splitlines()) == 9
    meta = json.loads(extra["meta.json"])
    assert meta["sample_rate"] == 16000 and meta["num_mel_bins"] == 20 and meta["feature_cmvn_included"]
    for m in (loaded, plain):
        assert m.units() == units and m.sos_symbol() == m.eos_symbol() == 8 and m.blank_id() == 0
        assert (m.subsampling_rate(), m.right_context(), m.min_input_length()) == (4, 6, 7)
        assert (m.sample_rate(), m.num_mel_bins(), m.frame_length(), m.frame_shift()) == (16000, 20, 25.0, 10.0)
        assert not m.is_bidirectional_decoder() and m.unit_separator() == ""
    # the data-pipeline CMVN is inside the exported module: raw features in, same hypotheses
    x, lengths = batch([50, 33, 12], seed=7)
    normalised = (x - cmvn[0]) * cmvn[1]
    expected = decode(model, normalised, lengths, DecodingOptions(modes=MODES, beam_size=3))
    with torch.no_grad():
        assert plain.decode(x, lengths, beam_size=3) == expected
        # batch of one, and a different batch size than the one scripted with
        assert plain.ctc_greedy_search(x[2:, :12], lengths[2:]) == expected["ctc_greedy_search"][2:]
        with pytest.raises(Exception, match="frames"):  # too short for the subsampling
            plain.ctc_greedy_search(x[:1, :5], torch.tensor([5]))


def test_check_against_eager_reports_a_difference():
    model = tiny_model(vocab_size=9, seed=7).eval()
    scripted = script_model(model, units_for(9), **FEAT)
    with torch.no_grad():
        model.ctc.ctc_lo.bias[3] += 5.0  # the eager model changed after scripting
    x, lengths = batch([40, 30])
    with pytest.raises(ExportCheckError, match="ctc_greedy_search"):
        check_against_eager(model, scripted, x, lengths)


class PythonOnlyDropout(torch.nn.Module):
    """A dropout whose training path TorchScript cannot compile (Python's random)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training:
            return x
        return x * (torch.rand_like(x) > self.p) / (1.0 - self.p) * random.choice([1.0])


def test_dropout_layers_are_identity_in_the_export():
    model = tiny_model(vocab_size=9, seed=8).eval()
    model.encoder.encoders[0].dropout = PythonOnlyDropout(0.1)
    model.decoder.decoders[0].dropout = PythonOnlyDropout(0.1)
    model.eval()
    with pytest.raises(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.script(model.encoder)
    scripted = script_model(model, units_for(9), **FEAT)
    assert isinstance(model.encoder.encoders[0].dropout, PythonOnlyDropout)  # the model is left as it was
    x, lengths = batch([50, 31])
    assert_same(model, scripted, x, lengths, beam_size=3)


def test_attention_only_model_exports_and_refuses_the_ctc_modes(tmp_path):
    """A model without a CTC head (ctc_weight 0) exports (it once was refused): its
    ``attention`` equals eager decoding, the CTC modes refuse with the reason."""
    model = tiny_model(vocab_size=9, seed=9, model_conf={"ctc_weight": 0.0}).eval()
    with torch.no_grad():
        model.decoder.output_layer.bias[model.eos] -= 2.0  # non-empty hypotheses
    summary = export_model(model, units_for(9), tmp_path / "final.zip", **FEAT)
    assert summary["modes"] == ["attention"]
    scripted, extra = load_exported(tmp_path / "final.zip")
    assert json.loads(extra["meta.json"])["modes"] == ["attention"] == scripted.supported_modes()
    x, lengths = batch([50, 31], seed=9)
    expected = decode(model, x, lengths, DecodingOptions(modes=["attention"], beam_size=3))
    assert any(expected["attention"])
    with torch.no_grad():
        assert scripted.attention(x, lengths, 3) == expected["attention"]
        assert scripted.decode(x, lengths, beam_size=3) == expected
        with pytest.raises(Exception, match="mode ctc_greedy_search needs a CTC head"):
            scripted.ctc_greedy_search(x, lengths)
        with pytest.raises(Exception, match="mode attention_rescoring needs a CTC head"):
            scripted.attention_rescoring(x, lengths, 3, 0.3, 0.0, 0.999)
    with pytest.raises(ValueError, match="9 outputs"):
        script_model(tiny_model(vocab_size=9), units_for(8), **FEAT)
