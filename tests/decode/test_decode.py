"""``decode``: all four modes from one encoder pass, on a tiny model overfit to real
synthesized speech."""
import pytest
import soundfile as sf
import torch
import torchaudio

from asrkit.decode import MODES, decode
from tests.models.tiny import tiny_model

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
    hyps = decode(model, x, x_lengths, MODES, beam_size=4, ctc_weight=0.3)
    assert list(hyps) == list(MODES)
    for mode in MODES:
        assert hyps[mode] == targets, mode


def test_hypotheses_same_alone_and_in_padded_batch(overfit):
    model, x, x_lengths, _ = overfit
    batch = decode(model, x, x_lengths, MODES, beam_size=4)
    for b, n in enumerate(x_lengths.tolist()):
        alone = decode(model, x[b:b + 1, :n], x_lengths[b:b + 1], MODES, beam_size=4)
        for mode in MODES:
            assert alone[mode][0] == batch[mode][b], mode


def test_random_model_hypotheses_same_alone_and_in_batch():
    model = tiny_model(vocab_size=9, seed=2, encoder_conf={"cnn_module_norm": "batch_norm"}).eval()
    with torch.no_grad():
        model.decoder.output_layer.bias[model.eos] += 2.0  # keep attention hypotheses short
    g = torch.Generator().manual_seed(0)
    lengths = [50, 37, 29]
    x = torch.randn(3, 50, 20, generator=g)
    batch = decode(model, x, torch.tensor(lengths), MODES, beam_size=3, ctc_weight=0.5)
    for b, n in enumerate(lengths):
        alone = decode(model, x[b:b + 1, :n], torch.tensor([n]), MODES, beam_size=3, ctc_weight=0.5)
        for mode in MODES:
            assert alone[mode][0] == batch[mode][b], mode


def test_modes_are_checked():
    model = tiny_model(model_conf={"ctc_weight": 1.0}).eval()
    x, lengths = torch.randn(1, 30, 20), torch.tensor([30])
    with pytest.raises(ValueError, match="unknown decoding mode"):
        decode(model, x, lengths, ["beam"])
    with pytest.raises(ValueError, match="mode attention needs an attention decoder; this model has none"):
        decode(model, x, lengths, ["attention"])
    assert list(decode(model, x, lengths, ["ctc_greedy_search"])) == ["ctc_greedy_search"]
