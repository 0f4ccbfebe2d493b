#!/usr/bin/env python3
"""Score every decoding mode of a decode directory and print one table.

    tools/score_decodes.py --ref data/test/text --decode_dir exp/conformer/decode_test

For each ``<decode_dir>/<mode>/text`` it writes ``<mode>/cer`` (characters, spaces
excluded) and ``<mode>/wer`` (words) with per-utterance alignments and Kaldi-style
totals, then prints (and writes to ``<decode_dir>/results.md``) a markdown table of CER,
WER and sentence error rate per mode.  The score covers the utterances the mode decoded; a
reference without a hypothesis (an utterance ``asrkit.bin.recognize`` skipped: its log
names each with the reason) is not scored but counted apart, in the table's last column
and the files' last line -- as ``recognize --score`` reports it (docs/decoding.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asrkit.metrics import format_alignment, read_text, score

MODES_ORDER = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]


def mode_key(mode: str) -> tuple[int, str]:
    """Sort key of the score tables' rows: the CTC/attention modes in :data:`MODES_ORDER`,
    then any other mode (the transducer ones) by name."""
    return (MODES_ORDER.index(mode) if mode in MODES_ORDER else len(MODES_ORDER), mode)


def score_mode(refs: dict, hyp_path: Path) -> tuple[dict, int]:
    """The mode's ``{"cer": Totals, "wer": Totals}`` over the references it has a hypothesis
    for, and how many it has none for (written to ``cer`` and ``wer`` beside ``hyp_path``)."""
    hyps = read_text(hyp_path.read_text(encoding="utf-8").splitlines(), str(hyp_path))
    decoded = {k: v for k, v in refs.items() if k in hyps}
    missing = len(refs) - len(decoded)
    out = {}
    for label, mode in (("cer", "char"), ("wer", "word")):
        totals, details = score(decoded, hyps, mode=mode)
        text = "".join(format_alignment(k, a, label.upper()) + "\n" for k, a in details)
        text += totals.summary(label.upper()) + "\n" + totals.sentence_summary() + "\n"
        text += f"scored {len(decoded)} utterances; not scored: {missing} without a hypothesis (not decoded)\n"
        (hyp_path.parent / label).write_text(text, encoding="utf-8")
        out[label] = totals
    return out, missing


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", required=True, type=Path, help="reference Kaldi text")
    p.add_argument("--decode_dir", required=True, type=Path)
    args = p.parse_args(argv)
    refs = read_text(args.ref.read_text(encoding="utf-8").splitlines(), str(args.ref))
    modes = sorted((d.name for d in args.decode_dir.iterdir() if (d / "text").is_file()),
                   key=mode_key)
    if not modes:
        print(f"error: no <mode>/text under {args.decode_dir}", file=sys.stderr)
        return 1
    rows = ["| mode | CER % | WER % | SER % | CER errors (ins/del/sub) / chars | not decoded |",
            "| --- | ---: | ---: | ---: | --- | ---: |"]
    for mode in modes:
        t, missing = score_mode(refs, args.decode_dir / mode / "text")
        cer, wer = t["cer"], t["wer"]
        ser = 100 * cer.utts_wrong / max(cer.utts, 1)
        rows.append(f"| {mode} | {100 * cer.rate:.2f} | {100 * wer.rate:.2f} | {ser:.2f} | "
                    f"{cer.errors} ({cer.ins}/{cer.dels}/{cer.sub}) / {cer.ref_len} | {missing} |")
    table = "\n".join(rows) + "\n"
    (args.decode_dir / "results.md").write_text(table, encoding="utf-8")
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
