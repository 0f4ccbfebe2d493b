"""``model: whisper`` through asrkit's own entry points: an OpenAI-layout file converted by
:func:`asrkit.checkpoint.whisper.convert_openai_file` (WeNet's converter: a ``train.yaml`` and
a checkpoint), the config read by ``load_config``, the tokenizer by ``build_tokenizer``, the
model by ``build_model`` and its weights by ``load_weights``; the encoder output and the
decoder's logits equal to the reference test's path (``load_openai_whisper``, which
``test_openai_reference.py`` holds equal to openai-whisper); the loss on WeNet's Whisper
targets; the config refusals in one line."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from asrkit.checkpoint.load import load_checkpoint
from asrkit.checkpoint.weights import load_weights
from asrkit.checkpoint.whisper import convert_openai_file, load_openai_whisper
from asrkit.config import load_config
from asrkit.data.whisper_features import log_mel_spectrogram
from asrkit.models.losses import label_smoothing_loss
from asrkit.models.registry import build_model
from asrkit.models.whisper import WhisperAsrModel
from asrkit.schema import ConfigError
from asrkit.text.tokenizer import build_tokenizer
from tests.models.whisper.openai_files import random_openai_file

pytest.importorskip("whisper")
pytest.importorskip("tiktoken")

@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper")
    source = random_openai_file(folder / "tiny-random.pt")
    config_path, checkpoint_path = convert_openai_file(source, folder / "converted")
    return source, config_path, checkpoint_path


def built(config_path: Path, checkpoint_path: Path):
    cfg = load_config(config_path)
    tokenizer = build_tokenizer(cfg)
    model = build_model(cfg, cfg.dataset_conf.feat_dim, tokenizer.vocabulary)
    load_weights(model, load_checkpoint(checkpoint_path), str(checkpoint_path))
    return cfg, tokenizer, model.eval()


def test_converted_files_load_and_compute_the_reference(converted):
    source, config_path, checkpoint_path = converted
    cfg, tokenizer, model = built(config_path, checkpoint_path)
    assert isinstance(model, WhisperAsrModel) and cfg.model == "whisper" and cfg.tokenizer == "whisper"
    assert cfg.dataset_conf.feats_type == "log_mel_spectrogram" and cfg.dataset_conf.feat_dim == 80
    assert model.ctc is not None and model.ctc.blank_id == tokenizer.vocabulary.blank_id == 50362
    _, reference = load_openai_whisper(source)

    generator = torch.Generator().manual_seed(1)
    audio = [0.1 * torch.randn(n, generator=generator) for n in (16000, 11200)]
    feats = [log_mel_spectrogram(a, 80) for a in audio]                       # 100 and 70 frames
    lengths = torch.tensor([f.size(0) for f in feats])
    batch = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
    with torch.no_grad():
        enc_out, enc_lengths = model.encode(batch, lengths)
        assert enc_lengths.tolist() == [50, 35]
        for b, f in enumerate(feats):
            want = reference.embed_audio(f.unsqueeze(0))
            torch.testing.assert_close(enc_out[b:b + 1, :enc_lengths[b]], want, atol=1e-5, rtol=0)
        prompt = model.decoder_prompt() + tokenizer.encode(" eight nine")
        tokens = torch.tensor([prompt])
        want_logits = reference.logits(tokens, reference.embed_audio(feats[0].unsqueeze(0)))
        mask = torch.ones(1, 1, 50, dtype=torch.bool)
        got = model.decoder.forward_logits(enc_out[:1, :50], mask, tokens, torch.tensor([len(prompt)]))
        torch.testing.assert_close(got, want_logits, atol=1e-4, rtol=0)


def test_loss_is_on_wenets_whisper_targets(converted):
    """``loss_att`` = Σ_u the label-smoothed loss of ``P + y`` -> ``P[1:] + y + [eot]``
    (P = sot, <|zh|> -- WeNet's converter's language_conf --, <|transcribe|>, <|notimestamps|>;
    eot as the config says: <|endoftext|>), each utterance alone; ``num_tokens`` = Σ (L_u + 4)."""
    _, config_path, checkpoint_path = converted
    cfg, tokenizer, model = built(config_path, checkpoint_path)
    sot, eot = cfg.tokenizer_conf.special_tokens["sot"], cfg.tokenizer_conf.special_tokens["eot"]
    assert model.decoder_prompt() == [sot, sot + 2, 50359, 50363] and eot == 50257  # zh, transcribe, notimestamps
    texts = [tokenizer.encode(" one two three four"), tokenizer.encode(" five")]
    target = torch.nn.utils.rnn.pad_sequence([torch.tensor(t) for t in texts], batch_first=True, padding_value=-1)
    target_lengths = torch.tensor([len(t) for t in texts])
    generator = torch.Generator().manual_seed(2)
    feats = torch.randn(2, 60, 80, generator=generator)
    feats_lengths = torch.tensor([60, 44])
    with torch.no_grad():
        out = model(feats, feats_lengths, target, target_lengths)
        enc_out, enc_lengths = model.encode(feats, feats_lengths)
        want = 0.0
        for b, text in enumerate(texts):
            ys_in = torch.tensor([model.decoder_prompt() + text])
            ys_out = torch.tensor([model.decoder_prompt()[1:] + text + [eot]])
            mask = torch.ones(1, 1, int(enc_lengths[b]), dtype=torch.bool)
            logits = model.decoder.forward_logits(enc_out[b:b + 1, :enc_lengths[b]], mask, ys_in,
                                                  torch.tensor([ys_in.size(1)]))
            want += float(label_smoothing_loss(logits, ys_out, cfg.model_conf.lsm_weight).sum())
    assert float(out["loss_att"]) == pytest.approx(want, rel=1e-5)
    assert int(out["num_tokens"]) == sum(len(t) + 4 for t in texts) == int(out["acc_total"])
    assert float(out["loss"]) == pytest.approx(0.3 * float(out["loss_ctc"]) + 0.7 * want, rel=1e-5)


@pytest.mark.parametrize("edit, message", [
    ({"tokenizer_conf": {"symbol_table_path": "units.txt"}}, "tokenizer_conf.symbol_table_path does not apply"),
    ({"tokenizer_conf": {"num_languages": None}}, "needs tokenizer_conf.num_languages"),
    ({"tokenizer_conf": {"num_languages": 101}}, "num_languages"),
    ({"tokenizer": "char", "tokenizer_conf": {"is_multilingual": False, "num_languages": 1,
                                              "symbol_table_path": "units.txt"}}, "model: whisper needs tokenizer"),
    ({"dataset_conf": {"log_mel_spectrogram_conf": {"n_fft": 512}}}, "n_fft 400"),
    ({"dataset_conf": {"log_mel_spectrogram_conf": {"num_mel_bins": 64}}}, "80 or 128 bins"),
    ({"dataset_conf": {"feats_type": "mfcc"}}, "feats_type"),
    ({"tokenizer_conf": {"special_tokens": {"sos": 1}}}, "unknown Whisper token"),
    ({"dataset_conf": {"language_conf": {"limited_langs": ["zh", "en"]}}}, "limited_langs"),
    ({"decoder_conf": {"use_output_layer": False}}, "use_output_layer"),
])
def test_config_refusals_are_one_line(converted, tmp_path, edit, message):
    _, config_path, _ = converted
    raw = yaml.safe_load(config_path.read_text())
    for key, value in edit.items():
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, dict):
                    raw[key][k] = {**raw[key][k], **v}
                else:
                    raw[key][k] = v
        else:
            raw[key] = value
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=message) as e:
        load_config(path)
    assert len(e.value.errors) == 1 and "\n" not in e.value.errors[0]


def test_special_tokens_other_than_the_tokenizers_are_refused(converted, tmp_path):
    _, config_path, _ = converted
    cfg = load_config(config_path, ["tokenizer_conf.special_tokens.transcribe=50358"])
    with pytest.raises(ValueError, match=r"special_tokens.transcribe is 50358; the tokenizer's <\|transcribe\|> "
                                         r"is id 50359"):
        build_model(cfg, 80, build_tokenizer(cfg).vocabulary)
    cfg = load_config(config_path, ["tokenizer_conf.num_languages=100"])
    with pytest.raises(ValueError, match="output_dim 51865 != vocabulary size 51866"):
        build_model(cfg, 80, build_tokenizer(cfg).vocabulary)


def test_a_language_the_vocabulary_lacks_is_refused(converted):
    _, config_path, checkpoint_path = converted
    _, _, model = built(config_path, checkpoint_path)
    model.language = "yue"  # (large-v3's 100th language; this vocabulary has 99)
    with pytest.raises(ValueError, match="'yue' has no token in this vocabulary"):
        model.decoder_prompt()
