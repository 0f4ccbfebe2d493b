"""Whisper's tokenizer (``tokenizer: whisper``): OpenAI's byte-level BPE read with ``tiktoken``
from the ``.tiktoken`` file the installed ``openai-whisper`` package ships
(``whisper/assets/multilingual.tiktoken`` with ``is_multilingual``, ``gpt2.tiktoken``
without; found without importing the package), and Whisper's special tokens numbered as
``whisper.tokenizer.get_encoding`` numbers them.

Ids: the file's ``R`` ranks are ids ``0 .. R−1`` (50257 multilingual, 50256 English-only);
then, in this order, one id each: ``<|endoftext|>`` (``R``), ``<|startoftranscript|>``, the
first ``num_languages`` language tokens of :data:`LANGUAGES` (``<|en|>``, ``<|zh|>``, ...),
``<|translate|>``, ``<|transcribe|>``, ``<|startoflm|>``, ``<|startofprev|>``,
``<|nospeech|>``, ``<|notimestamps|>``, and the 1501 timestamps ``<|0.00|>`` ..
``<|30.00|>`` (0.02 s apart).  The vocabulary size is ``R + 1609 + num_languages − 100``
(large-v3: 51866; tiny: 51865; ``*.en``: 51864, which still has 99 language tokens, as the
package numbers them).
"""
from __future__ import annotations

import base64
import functools
from pathlib import Path
from typing import Sequence

from asrkit.text.base import Tokenizer
from asrkit.text.units import UnitsError
from asrkit.text.vocabulary import Vocabulary
from asrkit.whisper_assets import whisper_asset

# Whisper's language codes, in the package's order (the order of their ids)
LANGUAGES = tuple(
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt "
    "la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc "
    "ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue".split())
TIMESTAMPS = 1501
# tokenizer_conf.special_tokens of tokenizer: whisper (WeNet's keys, as its converter writes them)
# -> the token each names (model: whisper reads its prompt and targets' ids there)
WHISPER_TOKENS = {"sot": "<|startoftranscript|>", "eot": "<|endoftext|>", "sot_prev": "<|startofprev|>",
                  "transcribe": "<|transcribe|>", "translate": "<|translate|>", "no_timestamps": "<|notimestamps|>",
                  "no_speech": "<|nospeech|>", "timestamp_begin": "<|0.00|>"}
# tiktoken's split pattern for Whisper (the package's ``pat_str``)
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def special_token_names(num_languages: int) -> list[str]:
    """The special tokens' names in id order (see the module docstring)."""
    if not 1 <= num_languages <= len(LANGUAGES):
        raise ValueError(f"tokenizer_conf.num_languages must be in 1..{len(LANGUAGES)}, got {num_languages}")
    return ["<|endoftext|>", "<|startoftranscript|>", *(f"<|{c}|>" for c in LANGUAGES[:num_languages]),
            "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
            "<|notimestamps|>", *(f"<|{i * 0.02:.2f}|>" for i in range(TIMESTAMPS))]


def tiktoken_path(is_multilingual: bool) -> Path:
    """The package's ``multilingual.tiktoken`` / ``gpt2.tiktoken``; :class:`UnitsError` (one
    line) without the ``openai-whisper`` package."""
    path = whisper_asset(f"{'multilingual' if is_multilingual else 'gpt2'}.tiktoken")
    if path is None:
        raise UnitsError("tokenizer: whisper reads the openai-whisper package's tiktoken files: "
                         "pip install -r requirements.txt")
    return path


@functools.lru_cache(maxsize=4)
def _encoding(is_multilingual: bool, num_languages: int):
    import tiktoken  # (loaded only when a Whisper tokenizer is built)

    path = tiktoken_path(is_multilingual)
    ranks = {base64.b64decode(token): int(rank)
             for token, rank in (line.split() for line in path.read_text().splitlines() if line)}
    specials = {name: len(ranks) + i for i, name in enumerate(special_token_names(num_languages))}
    return tiktoken.Encoding(name=path.name, explicit_n_vocab=len(ranks) + len(specials), pat_str=PATTERN,
                             mergeable_ranks=ranks, special_tokens=specials)


class WhisperTokenizer(Tokenizer):
    """Text <-> Whisper's ids (module docstring).  :meth:`encode` never emits a special
    token (a ``<|...|>`` in the text is ordinary text) and never ``<unk>`` (byte-level BPE
    covers every string); :meth:`decode` drops the special tokens (ids ``>= eot``).

    Its :class:`Vocabulary`: ``sos_id`` = ``<|startoftranscript|>``, ``eos_id`` =
    ``<|endoftext|>``, ``blank_id`` = ``<|nospeech|>`` (the CTC blank WeNet's converter
    writes, ``ctc_conf.ctc_blank_id``), ``unk_id`` = ``<|endoftext|>`` (Whisper has no
    unknown token).  ``symbols``: each BPE id's bytes as UTF-8 text (invalid bytes
    backslash-escaped: a piece may be part of a character), the special tokens' names."""

    def __init__(self, is_multilingual: bool, num_languages: int):
        self.encoding = _encoding(bool(is_multilingual), int(num_languages))
        self.is_multilingual = bool(is_multilingual)
        self.num_languages = int(num_languages)
        self.eot = self.encoding.eot_token
        specials = self.encoding._special_tokens
        self.special_ids: dict[str, int] = dict(specials)
        self.symbols = [self.encoding.decode_single_token_bytes(i).decode("utf-8", "backslashreplace")
                        for i in range(self.eot)] + sorted(specials, key=specials.get)
        self._ids = {sym: i for i, sym in enumerate(self.symbols)}
        self.vocabulary = Vocabulary(tuple(self.symbols), blank_id=specials["<|nospeech|>"], unk_id=self.eot,
                                     sos_id=specials["<|startoftranscript|>"], eos_id=self.eot)
        self.unk_count = 0

    def token_id(self, name: str) -> int:
        """The id of special token ``name`` (``"<|transcribe|>"``, ``"<|en|>"``, ...); KeyError
        naming it when this vocabulary has none."""
        if name not in self.special_ids:
            raise KeyError(f"{name} is not a special token of this Whisper vocabulary")
        return self.special_ids[name]

    def language_id(self, code: str) -> int:
        """The id of ``<|code|>`` (``"en"``, ``"zh"``, ...)."""
        return self.token_id(f"<|{code}|>")

    def encode(self, txt: str) -> list[int]:
        return self.encoding.encode_ordinary(txt)

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        for i in ids:
            if not 0 <= i < len(self.symbols):
                raise IndexError(f"token id {i} outside the symbol table (size {len(self.symbols)})")
        return self.encoding.decode([i for i in ids if i < self.eot])

    def text_to_symbols(self, txt: str) -> list[str]:
        return [self.symbols[i] for i in self.encode(txt)]

    def symbols_to_text(self, symbols: Sequence[str]) -> str:
        return self.decode(self._ids[s] for s in symbols)

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["encoding"]  # (rebuilt from the file: tiktoken's Encoding does not pickle)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.encoding = _encoding(self.is_multilingual, self.num_languages)
