"""The synthesized default corpus: sizes, speaker-independent splits, determinism, realism."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import soundfile as sf

from tests.conftest import TINY_SIZES, build_corpus
from tests.helpers import run_tool


def _speakers(split_dir):
    return {line.split()[1] for line in (split_dir / "utt2spk").read_text().splitlines()}


def _variants(speakers):
    return {s.split("_", 1)[1] for s in speakers}


def test_sizes_files_and_disjoint_variants(tiny_corpus):
    for name, split in tiny_corpus.splits.items():
        keys_scp = [line.split()[0] for line in split.wav_scp.read_text().splitlines()]
        keys_txt = [line.split()[0] for line in split.text.read_text().splitlines()]
        assert len(keys_scp) == TINY_SIZES[name] and keys_scp == keys_txt
    train = _variants(_speakers(tiny_corpus.splits["train"].dir))
    for held_out in ("dev", "test"):
        assert not train & _variants(_speakers(tiny_corpus.splits[held_out].dir))
    planned = json.loads((tiny_corpus.root / "speakers.json").read_text())
    assert len(planned["train"]) >= 20 and not set(planned["train"]) & set(planned["test"])


def test_audio_format_silence_and_noise(tiny_corpus):
    split = tiny_corpus.splits["train"]
    words = {"zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}
    for line in split.text.read_text().splitlines()[:10]:
        key, txt = line.split(maxsplit=1)
        assert 1 <= len(txt.split()) <= 7 and set(txt.split()) <= words
        info = sf.info(str(split.dir / "wav" / f"{key}.wav"))
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        audio, _ = sf.read(str(split.dir / "wav" / f"{key}.wav"))
        edge = np.concatenate([audio[:400], audio[-400:]])  # 25 ms at each end: silence + noise
        speech_rms = np.sqrt(np.mean(audio ** 2))
        edge_rms = np.sqrt(np.mean(edge ** 2))
        assert 0 < edge_rms < speech_rms / 2, "edges should hold low-level noise, not speech"


def test_rerun_is_byte_identical(tmp_path, tiny_corpus):
    sizes = {"train": 6, "dev": 2, "test": 2}
    a = build_corpus(tmp_path / "a", sizes, seed=3)
    b = build_corpus(tmp_path / "b", sizes, seed=3)

    def digest(corpus):
        h = hashlib.sha256()
        for split in corpus.splits.values():
            for wav in sorted((split.dir / "wav").glob("*.wav")):
                h.update(wav.name.encode() + wav.read_bytes())
            h.update(split.text.read_bytes())
        return h.hexdigest()

    assert digest(a) == digest(b)
    c = build_corpus(tmp_path / "c", sizes, seed=4)
    assert digest(c) != digest(a)


def test_single_voice_split_is_one_clean_train_voice(tmp_path):
    out = tmp_path / "corpus"
    # seed 1 is the recipes' seed; m3 is a train variant under it
    args = ["--out", out, "--task", "sentences", "--train", 4, "--dev", 1, "--test", 1, "--seed", 1,
            "--single_voice", 6]
    run_tool("synthesize_corpus.py", *args)
    planned = json.loads((out / "speakers.json").read_text())
    split = out / "train_single"
    assert _speakers(split) == {"enus_m3"} and planned["train_single"] == ["m3"] and "m3" in planned["train"]
    keys = [line.split()[0] for line in (split / "wav.scp").read_text().splitlines()]
    assert len(keys) == 6
    for key in keys:
        audio, _ = sf.read(str(split / "wav" / f"{key}.wav"))
        # clean: 0.1 s of digital silence each side, peak 0.5, no noise
        assert np.all(audio[:1600] == 0) and np.all(audio[-1600:] == 0)
        assert abs(np.max(np.abs(audio)) - 0.5) < 1e-3
    # a dev/test variant is refused: those voices must stay unheard in training
    bad = run_tool("synthesize_corpus.py", *args, "--single_voice_variant", planned["test"][0], check=False)
    assert bad.returncode != 0 and "not a train variant" in bad.stderr


def test_non_native_split_reads_english_phonemes_in_foreign_voices(tmp_path):
    from tools.synthesize_corpus import NON_NATIVE_LANGUAGES, english_phonemes, synthesize

    out = tmp_path / "corpus"
    run_tool("synthesize_corpus.py", "--out", out, "--train", 2, "--dev", 1, "--test", 1, "--seed", 1,
             "--non_native", 6)
    planned = json.loads((out / "speakers.json").read_text())
    split = out / "train_non_native"
    speakers = _speakers(split)
    assert len((split / "wav.scp").read_text().splitlines()) == 6
    assert {s.split("_", 1)[0] for s in speakers} <= set(NON_NATIVE_LANGUAGES)
    assert _variants(speakers) <= set(planned["train"])  # dev/test voices stay unheard
    # the foreign voice speaks the English phonemes (French spelling rules would say "t-w-o")
    assert english_phonemes("three two") == "[[Tr'i: t'u:]]"
    accented = synthesize(english_phonemes("three two"), "fr+m3", 170, 50)
    spelled = synthesize("three two", "fr+m3", 170, 50)
    native = synthesize("three two", "en-us+m3", 170, 50)
    assert accented.size != spelled.size and accented.size != native.size
