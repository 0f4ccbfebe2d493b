"""``tokenizer: whisper`` (asrkit.text.whisper) against the installed openai-whisper package:
the same vocabulary size, the same id for every special token, the same ids for text, for
the multilingual vocabulary (99 and large-v3's 100 languages) and the English-only one."""
from __future__ import annotations

import pickle

import pytest

from asrkit.text.whisper import WhisperTokenizer

whisper_tokenizer = pytest.importorskip("whisper.tokenizer")

TEXT = " Hello world, 你好世界! It's 3.5 <|en|> naïve"


@pytest.mark.parametrize("multilingual, num_languages", [(True, 99), (True, 100), (False, 99)])
def test_ids_equal_the_packages(multilingual, num_languages):
    ours = WhisperTokenizer(multilingual, num_languages)
    ref = whisper_tokenizer.get_tokenizer(multilingual, num_languages=num_languages)
    assert ours.vocabulary.size == ref.encoding.n_vocab == len(ours.symbols)
    assert ours.special_ids == ref.encoding._special_tokens
    for name in ("<|endoftext|>", "<|startoftranscript|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
                 "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>", "<|0.00|>", "<|30.00|>", "<|en|>"):
        assert ours.token_id(name) == ref.encoding.encode_single_token(name), name
    assert (ours.eot, ours.token_id("<|startoftranscript|>"), ours.token_id("<|nospeech|>"),
            ours.token_id("<|0.00|>")) == (ref.eot, ref.sot, ref.no_speech, ref.timestamp_begin)
    assert ours.token_id(f"<|{'yue' if num_languages == 100 else 'su'}|>") == ref.sot + num_languages
    ids = ours.encode(TEXT)
    assert ids == ref.encoding.encode(TEXT, disallowed_special=())  # (a "<|en|>" in the text is text)
    assert ids[:3] == ref.encode(" Hello world,")
    assert ours.decode(ids + [ref.sot, ref.eot]) == TEXT
    v = ours.vocabulary
    assert (v.sos_id, v.eos_id, v.blank_id, v.unk_id) == (ref.sot, ref.eot, ref.no_speech, ref.eot)
    assert pickle.loads(pickle.dumps(ours)).encode(TEXT) == ids


def test_unknown_special_token_is_named():
    with pytest.raises(KeyError, match="yue"):
        WhisperTokenizer(True, 99).token_id("<|yue|>")
