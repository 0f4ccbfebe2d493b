"""asrkit's Whisper (asrkit.checkpoint.whisper + asrkit.models.whisper) against the reference
``openai-whisper`` package, on random weights written in OpenAI's file layout (fp16, as
OpenAI publishes them) and on a real recording padded to 30 s (Whisper's encoder asserts
3000 frames): log-mel features, encoder output and decoder logits equal to 1e-4, and the
same greedy tokens after Whisper's prompt.  Both sides run in float32 from the file's fp16
weights.  Dimensions: ``tiny`` (multilingual vocabulary), ``base`` with the English-only
vocabulary of ``base.en``, and ``tiny`` with large-v3's 128 mel bins and vocabulary (the last
two with fewer layers, see :data:`SIZES`)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import soundfile as sf
import torch

from asrkit.checkpoint.load import CheckpointError
from asrkit.checkpoint.whisper import build_from_config, load_openai_whisper, wenet_config
from asrkit.data.whisper_features import log_mel_spectrogram, padded_30s
from asrkit.schema import ConfigError

whisper = pytest.importorskip("whisper")

WAV = Path(__file__).resolve().parents[2] / "fixtures" / "wenet" / "wavs" / "Mike-test-00002.wav"
TINY = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=384, n_audio_head=6, n_audio_layer=4,
            n_vocab=51865, n_text_ctx=448, n_text_state=384, n_text_head=6, n_text_layer=4)
# tiny's dimensions in full; base.en's and the 128-bin model's with fewer layers (base has 6 + 6,
# the 128-bin one is tiny's with 4 + 4): only to keep the three comparisons within 20 s on 2
# shared CPU cores (every layer is the same code; the layer count changes no mapping)
SIZES = {
    "tiny": TINY,
    "base.en-2layers": dict(TINY, n_audio_state=512, n_audio_head=8, n_audio_layer=2, n_vocab=51864,
                            n_text_state=512, n_text_head=8, n_text_layer=2),
    "tiny-128mel-v3vocab-1layer": dict(TINY, n_mels=128, n_vocab=51866, n_audio_layer=1, n_text_layer=1),
}
TOLERANCE = 1e-4
GREEDY_STEPS = 3


@pytest.fixture(scope="module")
def audio() -> torch.Tensor:
    samples, rate = sf.read(WAV, dtype="float32")
    assert rate == 16000
    return torch.from_numpy(samples)


def random_reference(dims: dict, seed: int):
    """An openai-whisper model of ``dims`` with random weights everywhere (LayerNorms and the
    decoder's positional table too, which Whisper leaves at 1/0 and uninitialised)."""
    torch.manual_seed(seed)
    model = whisper.model.Whisper(whisper.model.ModelDimensions(**dims))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name.split(".")[-2]:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
        model.decoder.positional_embedding.normal_(0.0, 0.02)
    return model


def write_openai_file(model, path: Path) -> None:
    torch.save({"dims": dataclasses.asdict(model.dims),
                "model_state_dict": {k: v.half() for k, v in model.state_dict().items()}}, path)


def reference_from_file(path: Path):
    """What ``whisper.load_model`` does with a file, on CPU (float32 parameters)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = whisper.model.Whisper(whisper.model.ModelDimensions(**checkpoint["dims"]))
    model.load_state_dict(checkpoint["model_state_dict"])
    return model.eval()


@pytest.mark.parametrize("size", sorted(SIZES))
def test_equal_to_openai_whisper(size, audio, tmp_path):
    dims = SIZES[size]
    path = tmp_path / f"{size}.pt"
    write_openai_file(random_reference(dims, seed=len(size)), path)
    reference = reference_from_file(path)
    config, model = load_openai_whisper(path)
    assert config["input_dim"] == dims["n_mels"] and config["output_dim"] == dims["n_vocab"]

    want_mel = whisper.log_mel_spectrogram(whisper.pad_or_trim(audio), dims["n_mels"])  # [n_mels, 3000]
    feats = log_mel_spectrogram(padded_30s(audio), dims["n_mels"])                    # [3000, n_mels]
    assert feats.shape == (3000, dims["n_mels"])
    torch.testing.assert_close(feats, want_mel.t(), atol=1e-5, rtol=0)

    tokenizer = whisper.tokenizer.get_tokenizer(reference.is_multilingual, num_languages=reference.num_languages,
                                                language="en", task="transcribe")
    prompt = list(tokenizer.sot_sequence_including_notimestamps)
    if reference.is_multilingual:
        assert tokenizer.decode_with_timestamps(prompt) == "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    with torch.no_grad():
        want_audio = reference.embed_audio(want_mel.unsqueeze(0))
        got_audio = model.embed_audio(feats.unsqueeze(0))
        torch.testing.assert_close(got_audio, want_audio, atol=TOLERANCE, rtol=0)
        want_tokens = reference_greedy(reference, want_audio, prompt, GREEDY_STEPS)
        assert model.greedy(got_audio, prompt, GREEDY_STEPS) == [want_tokens]
        # the logits of every position of the prompt, the greedy tokens and two of the text's
        tokens = torch.tensor([prompt + want_tokens + tokenizer.encode(" eight nine")])
        want_logits = reference.logits(tokens, want_audio)
        torch.testing.assert_close(model.logits(tokens, got_audio), want_logits, atol=TOLERANCE, rtol=0)


def reference_greedy(reference, audio_features: torch.Tensor, prompt: list[int], steps: int) -> list[int]:
    """``steps`` argmax tokens after ``prompt`` as Whisper's own decoding runs its decoder:
    with its key/value cache (the cross-attention's keys and values computed once)."""
    cache, hooks = reference.install_kv_cache_hooks()
    try:
        tokens = torch.tensor([prompt])
        chosen: list[int] = []
        for _ in range(steps):
            logits = reference.decoder(tokens if not chosen else tokens[:, -1:], audio_features, kv_cache=cache)
            chosen.append(int(logits[0, -1].argmax()))
            tokens = torch.cat([tokens, torch.tensor([[chosen[-1]]])], dim=1)
    finally:
        for hook in hooks:
            hook.remove()
    return chosen

def test_config_is_wenets_and_refuses_what_asrkit_lacks():
    config = wenet_config(SIZES["tiny"])
    assert config["encoder_conf"]["input_layer"] == "conv1d2"
    assert config["encoder_conf"]["pos_enc_layer_type"] == "abs_pos_whisper"
    assert config["decoder_conf"]["input_layer"] == "embed_learnable_pe"
    languages = {key: config["tokenizer_conf"][key] for key in ("is_multilingual", "num_languages")}
    assert languages == {"is_multilingual": True, "num_languages": 99}
    assert config["tokenizer_conf"]["special_tokens"]["eot"] == 50257
    assert wenet_config(SIZES["tiny-128mel-v3vocab-1layer"])["tokenizer_conf"]["num_languages"] == 100
    english = wenet_config(SIZES["base.en-2layers"])["tokenizer_conf"]
    assert (english["is_multilingual"], english["num_languages"], english["special_tokens"]["sot"]) == (False, 99, 50257)
    config["encoder_conf"]["n_kv_head"] = 2
    with pytest.raises(ConfigError, match="n_kv_head"):
        build_from_config(config)


def test_not_an_openai_file_is_one_line(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"model": {}}, path)
    with pytest.raises(CheckpointError, match="not an OpenAI Whisper file") as e:
        load_openai_whisper(path)
    assert "\n" not in str(e.value)
    torch.save({"dims": dict(TINY, n_text_layer=1), "model_state_dict": {}}, path)
    with pytest.raises(CheckpointError, match="does not match the config's model: missing") as e:
        load_openai_whisper(path)
    assert "\n" not in str(e.value)
    torch.save({"dims": TINY, "model_state_dict": {}, "extra": _Pickled()}, path)
    with pytest.raises(CheckpointError, match="refused: it carries pickled objects") as e:
        load_openai_whisper(path)  # (never unpickled: the checkpoints' weights-only rule)
    assert "\n" not in str(e.value)


class _Pickled:
    """Not a tensor or plain type: a weights-only load refuses it."""
