"""``model: whisper`` through asrkit's decoding (:func:`asrkit.decode.decode`): the attention
modes start from Whisper's prompt and stop at ``eot``; CTC modes use the CTC head; every mode
gives the same tokens for an utterance alone and in a batch; greedy attention (beam 1) is
Whisper's greedy decoding (the reference path, :class:`asrkit.models.whisper.WhisperModel`,
which ``test_openai_reference.py`` holds equal to openai-whisper) cut at its first ``eot``.
(A model trained on the digits recipe decoding in every mode: docs/experiments/whisper_digits.md.)"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import soundfile as sf
import torch

from asrkit.checkpoint.load import load_checkpoint
from asrkit.checkpoint.weights import load_weights
from asrkit.checkpoint.whisper import convert_openai_file
from asrkit.config import load_config
from asrkit.data.whisper_features import log_mel_spectrogram
from asrkit.decode import DecodingOptions, decode
from asrkit.decode.modes import REGISTRY
from asrkit.decode.searcher import Searcher
from asrkit.models.registry import build_model
from asrkit.models.whisper import WhisperModel
from asrkit.text.tokenizer import build_tokenizer

from tests.models.whisper.openai_files import random_openai_file

pytest.importorskip("whisper")
pytestmark = pytest.mark.usefixtures("one_thread")  # (a busy machine slows a 2-thread search 10x)

WAVS = Path(__file__).resolve().parents[2] / "fixtures" / "wenet" / "wavs"
MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring")


def recordings() -> tuple[list[torch.Tensor], list[str]]:
    feats, texts = [], []
    for line in (WAVS / "text").read_text().splitlines():
        key, text = line.split(maxsplit=1)
        samples, rate = sf.read(WAVS / f"{key}.wav", dtype="float32")
        assert rate == 16000
        feats.append(log_mel_spectrogram(torch.from_numpy(samples), 80))
        texts.append(text)
    return feats, texts


def batch(feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.nn.utils.rnn.pad_sequence(feats, batch_first=True),
            torch.tensor([f.size(0) for f in feats]))


@pytest.fixture(scope="module")
def model_and_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper_decoding")
    config_path, checkpoint_path = convert_openai_file(random_openai_file(folder / "tiny-random.pt", seed=3),
                                                       folder / "converted")
    cfg = load_config(config_path)
    tokenizer = build_tokenizer(cfg)
    model = build_model(cfg, cfg.dataset_conf.feat_dim, tokenizer.vocabulary)
    load_weights(model, load_checkpoint(checkpoint_path), str(checkpoint_path))
    return model.eval(), tokenizer


def test_every_mode_runs_and_batch_equals_alone_on_random_weights(model_and_tokenizer):
    model, _ = model_and_tokenizer
    feats, _ = recordings()
    options = DecodingOptions(modes=MODES, beam_size=3)
    with torch.no_grad():
        together = decode(model, *batch(feats), options)
        for b, f in enumerate(feats):
            alone = decode(model, *batch([f]), options)
            for mode in MODES:
                assert alone[mode][0] == together[mode][b], mode
    assert set(MODES) == {m for m in REGISTRY if all(r.present(Searcher.of_model(model)) for r in REGISTRY[m].needs)}


def test_greedy_attention_is_whispers_greedy_decoding_cut_at_eot(model_and_tokenizer):
    """Beam 1 from ``[sot, <|en|>, <|transcribe|>, <|notimestamps|>]``: the argmax tokens of
    the teacher-forced logits, up to the first ``eot`` or the search's length limit
    (encoder frames + 1 − 4 tokens after the prompt).  Random weights rarely choose ``eot``:
    a second pass raises its bias (the output layer's, zero in a converted model) just
    enough to win within the first steps of the first utterance, so that the search must
    stop there."""
    model, _ = model_and_tokenizer
    model = copy.deepcopy(model)
    feats = [f[:60] for f in recordings()[0]]                     # 30 encoder frames: 27 steps
    whisper = WhisperModel(model.encoder, model.decoder)
    prompt = model.decoder_prompt()

    def check() -> list[list[int]]:
        with torch.no_grad():
            got = decode(model, *batch(feats), DecodingOptions(modes=("attention",), beam_size=1))["attention"]
            for b, f in enumerate(feats):
                audio_features = whisper.embed_audio(f.unsqueeze(0))
                want = whisper.greedy(audio_features, prompt, audio_features.size(1) + 1 - len(prompt))[0]
                if model.eos in want:
                    want = want[:want.index(model.eos)]
                assert got[b] == want
        return got

    assert [len(h) for h in check()] == [27, 27, 27]              # no eot: the length limit
    with torch.no_grad():
        audio_features = whisper.embed_audio(feats[0].unsqueeze(0))
        tokens = torch.tensor([prompt + check()[0][:4]])
        logits = whisper.logits(tokens, audio_features)[0, len(prompt) - 1:]
        gaps = logits.max(-1).values - logits[:, model.eos]
        model.decoder.output_layer.bias[model.eos] += float(gaps[1:].min()) + 1e-3
    assert len(check()[0]) < 4
