#!/usr/bin/env python3
"""AISHELL-1 (openslr 33) -> Kaldi ``wav.scp``, ``text`` and ``utt2spk`` per set.

Expected layout (``data_aishell.tgz`` extracted, and the per-speaker archives inside
``data_aishell/wav/`` unpacked, as ``local/download_and_untar.sh`` does)::

    CORPUS/data_aishell/wav/{train,dev,test}/<speaker>/<utt>.wav
    CORPUS/data_aishell/transcript/aishell_transcript_v0.8.txt

``CORPUS`` may also be the ``data_aishell`` directory itself.  Output, for each set
``train``, ``dev``, ``test``::

    OUT/<set>/wav.scp   <utt> <absolute path of the wav>
    OUT/<set>/text      <utt> <transcript with the word-separating spaces removed>
    OUT/<set>/utt2spk   <utt> <speaker = the wav's directory>

Semantics (those of WeNet's ``aishell_data_prep.sh``): the utterance key is the wav's
basename; a transcript line ``BAC009S0002W0122 而 对 楼市 成交 抑制 作用 最 大 的 限 购``
becomes ``BAC009S0002W0122 而对楼市成交抑制作用最大的限购``; only utterances that have
both audio and a transcript are kept, and the ones dropped on either side are counted
and reported (the full corpus has 141,925 wavs and 141,600 transcript lines: 120,098 /
14,326 / 7,176 utterances are kept).  Lines are sorted by key.  A file whose content
would not change is not rewritten.

Errors (exit status 1, one message): the corpus, a set directory or the transcript is
missing; the speaker archives are still packed; a wav basename occurs twice; a key has
two different transcripts; a set ends up empty; an output file cannot be written.

Usage:
    local/aishell_data_prep.py /export/data/openslr/33 data
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from asrkit.files import WriteError, atomic_write_text

SETS = ("train", "dev", "test")
TRANSCRIPT = Path("transcript") / "aishell_transcript_v0.8.txt"
FULL_CORPUS = {"train": 120098, "dev": 14326, "test": 7176}


class PrepError(Exception):
    """A problem with the corpus that stops the preparation."""


def find_root(corpus: Path) -> Path:
    """The ``data_aishell`` directory: ``corpus`` itself or ``corpus/data_aishell``."""
    for root in (corpus, corpus / "data_aishell"):
        if (root / "wav").is_dir() and (root / "transcript").is_dir():
            return root
    raise PrepError(f"{corpus} holds neither data_aishell/{{wav,transcript}} nor {{wav,transcript}}; "
                    f"pass the directory data_aishell.tgz was extracted into (or data_aishell itself)")


def read_transcript(path: Path) -> tuple[dict[str, str], list[str]]:
    """Key -> transcript without spaces, and the keys whose transcript is empty."""
    if not path.is_file():
        raise PrepError(f"transcript not found: {path}")
    texts: dict[str, str] = {}
    where: dict[str, int] = {}
    empty = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            words = line.split()
            if not words:
                continue
            key, text = words[0], "".join(words[1:])
            if not text:
                empty.append(key)
                continue
            if key in texts and texts[key] != text:
                raise PrepError(f"{path}:{lineno}: key {key} already has a different transcript "
                                f"(line {where[key]})")
            texts[key], where[key] = text, lineno
    return texts, empty


def find_wavs(wav_dir: Path, name: str) -> dict[str, tuple[str, str]]:
    """Key -> (absolute wav path, speaker) of ``wav_dir/<name>/<speaker>/<key>.wav``."""
    set_dir = wav_dir / name
    if not set_dir.is_dir():
        packed = sorted(wav_dir.glob("*.tar.gz"))
        if packed:
            raise PrepError(f"{set_dir} is missing but {wav_dir} holds {len(packed)} packed speaker archive(s) "
                            f"(e.g. {packed[0].name}); unpack them first: "
                            f"for f in {wav_dir}/*.tar.gz; do tar -xzf \"$f\" -C {wav_dir}; done")
        raise PrepError(f"set directory not found: {set_dir}")
    wavs: dict[str, tuple[str, str]] = {}
    for path in sorted(set_dir.glob("*/*")):
        if path.suffix.lower() != ".wav" or not path.is_file():
            continue
        wavs[path.stem] = (os.path.abspath(path), path.parent.name)
    return wavs


def write_table(path: Path, rows: dict[str, str]) -> None:
    """``<key> <value>`` lines sorted by key, written atomically; an unchanged file is left
    untouched."""
    content = "".join(f"{k} {rows[k]}\n" for k in sorted(rows))
    if path.is_file() and path.read_text(encoding="utf-8") == content:
        return
    atomic_write_text(path, content)


def examples(keys) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:5]) + (", ..." if len(keys) > 5 else "")


def prepare(corpus: Path, out: Path, log=sys.stderr) -> dict[str, int]:
    """Write ``out/<set>/{wav.scp,text,utt2spk}``; return the utterance count per set."""
    root = find_root(corpus)
    texts, empty = read_transcript(root / TRANSCRIPT)
    per_set = {name: find_wavs(root / "wav", name) for name in SETS}
    seen: dict[str, str] = {}
    for name, wavs in per_set.items():
        for key in wavs:
            if key in seen:
                raise PrepError(f"utterance {key} has a wav in both {seen[key]} and {name}")
            seen[key] = name

    counts = {}
    for name, wavs in per_set.items():
        keep = sorted(k for k in wavs if k in texts)
        no_text = sorted(k for k in wavs if k not in texts)
        if not keep:
            raise PrepError(f"{name}: none of the {len(wavs)} wav(s) under {root / 'wav' / name} "
                            f"has a transcript in {root / TRANSCRIPT}")
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        write_table(d / "wav.scp", {k: wavs[k][0] for k in keep})
        write_table(d / "text", {k: texts[k] for k in keep})
        write_table(d / "utt2spk", {k: wavs[k][1] for k in keep})
        counts[name] = len(keep)
        speakers = len({wavs[k][1] for k in keep})
        msg = f"{name}: {len(keep)} utterances from {speakers} speakers -> {d}"
        if no_text:
            msg += f"; dropped {len(no_text)} wav(s) without transcript ({examples(no_text)})"
        print(msg, file=log)
    no_audio = sorted(set(texts) - set(seen))
    if no_audio:
        print(f"dropped {len(no_audio)} transcript line(s) without audio ({examples(no_audio)})", file=log)
    if empty:
        print(f"dropped {len(empty)} transcript line(s) with no words ({examples(empty)})", file=log)
    if counts != FULL_CORPUS:
        print("note: the full AISHELL-1 gives " + ", ".join(f"{s} {n}" for s, n in FULL_CORPUS.items()),
              file=log)
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", type=Path, help="directory holding data_aishell/ (or data_aishell itself)")
    p.add_argument("out", type=Path, help="output root: <out>/{train,dev,test}/")
    args = p.parse_args(argv)
    try:
        prepare(args.corpus, args.out)
    except (PrepError, WriteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
