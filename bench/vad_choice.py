#!/usr/bin/env python3
"""Which speech detector should cut long audio?  Frame decisions of the Silero VAD (what
``asrkit transcribe`` uses), webrtcvad (aggressiveness 0-3) and a model's own CTC
posteriors (a frame is speech when P(blank) <= 0.8, the rule transcribe used before),
scored on what segmentation needs:

* **non-speech**: the files of ``bench/transcribe_long.py --non_speech`` (digital silence,
  white and pink noise, a 440 Hz tone and a C major chord at -30, -20, -10 dBFS): the
  share of frames called speech (should be 0) and how many files have any speech at all;
* **words and pauses**: ``--utterances`` utterances of 4-7 digit words synthesized alone
  with the test-split voices (``tools/synthesize_corpus.words_with_pauses``) and joined
  with pauses uniform in 0.2-0.5 s: the share of words with a speech frame inside (a word
  without one would be dropped), and of pauses holding a run of non-speech frames of at
  least 0.1 s (a pause the detector can cut at).

    python -m bench.vad_choice [--model exp/conformer_cpu ...] [--utterances 60] [--seed 7]

webrtcvad is not a dependency of asrkit: ``pip install webrtcvad-wheels`` to score it
(skipped otherwise).  Silero's frames are 32 ms (P(speech) >= 0.35, the default threshold),
webrtcvad's 30 ms, the CTC posteriors' 40 ms.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.transcribe_long import non_speech_files
from tools import synthesize_corpus as synth

RATE = 16000


def silero_frames(samples: np.ndarray, threshold: float = 0.35) -> tuple[np.ndarray, float]:
    from asrkit.transcribe import vad
    return vad.speech_probabilities(samples) >= threshold, vad.FRAME_SAMPLES / RATE


def webrtc_frames(mode: int):
    import webrtcvad
    detector = webrtcvad.Vad(mode)

    def frames(samples: np.ndarray) -> tuple[np.ndarray, float]:
        pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
        n = pcm.size // 480
        return np.array([detector.is_speech(pcm[i * 480:(i + 1) * 480].tobytes(), RATE) for i in range(n)]), 0.03
    return frames


def ctc_frames(model_dir: str):
    import torch

    from asrkit.decode.options import DecodingOptions
    from asrkit.transcribe import load_model
    model = load_model(model_dir)
    b = model.backend

    def frames(samples: np.ndarray) -> tuple[np.ndarray, float]:
        probs = []
        piece = 20 * RATE  # (20 s windows: the length the old endpoint pass used)
        with torch.inference_mode():
            for first in range(0, samples.size, piece):
                chunk = samples[first:first + piece]
                if chunk.size < 400 * 2:
                    continue
                feats = model.features(torch.from_numpy(chunk))
                if feats.size(0) < b.min_input_length:
                    continue
                enc, lengths = b.encode(feats.unsqueeze(0), torch.tensor([feats.size(0)]), DecodingOptions())
                probs.append(b.searcher.ctc_log_probs(enc, 0.0)[0, :int(lengths[0]), b.blank].exp())
        p = torch.cat(probs).numpy() if probs else np.zeros(0)
        return p <= 0.8, b.subsampling * b.frame_shift / 1000.0
    return frames


def score(frames, non_speech, utterances) -> dict:
    speech_share, files_with_speech = [], 0
    for _, samples in non_speech:
        decisions, _ = frames(samples)
        speech_share.append(decisions.mean() if decisions.size else 0.0)
        files_with_speech += bool(decisions.any())
    words = words_found = pauses = pauses_found = 0
    for utt in utterances:
        decisions, step = frames(utt["samples"])
        for start, end in utt["spans"]:
            words += 1
            words_found += bool(decisions[int(start / step):int(np.ceil(end / step))].any())
        for (_, end), (start, _) in zip(utt["spans"], utt["spans"][1:]):
            pauses += 1
            inside = decisions[int(np.ceil(end / step)):int(start / step)]
            run = best = 0
            for d in inside:
                run = 0 if d else run + 1
                best = max(best, run)
            pauses_found += best * step >= 0.1 - 1e-9
    return {"non_speech_frames_pct": 100.0 * float(np.mean(speech_share)), "files_with_speech": files_with_speech,
            "files": len(non_speech), "words_pct": 100.0 * words_found / words, "pauses_pct": 100.0 * pauses_found / pauses}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=[], help="score this model's CTC posteriors too")
    p.add_argument("--utterances", type=int, default=60)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    non_speech = [(n, x) for n, x in non_speech_files(args.seed) if "5 min" not in n]
    rng = np.random.default_rng([args.seed, 7])
    voices = synth.default_test_voices()
    utterances = [synth.words_with_pauses(rng, voices, word_count=(4, 8), pause_s=(0.2, 0.5), final_pause_s=0.4)
                  for _ in range(args.utterances)]
    detectors = [("Silero (P >= 0.35)", silero_frames)]
    try:
        import webrtcvad  # noqa: F401  (optional: only this comparison uses it)
        detectors += [(f"webrtcvad mode {m}", webrtc_frames(m)) for m in range(4)]
    except ImportError:
        print("(webrtcvad not installed: pip install webrtcvad-wheels to score it)", file=sys.stderr)
    detectors += [(f"CTC posteriors of {m} (P(blank) <= 0.8)", ctc_frames(m)) for m in args.model]
    print(f"{len(non_speech)} non-speech files; {args.utterances} utterances of digit words with 0.2-0.5 s pauses")
    print("| detector | non-speech frames called speech % | non-speech files with speech | words found % "
          "| pauses found (>= 0.1 s) % |\n| --- | ---: | ---: | ---: | ---: |")
    for name, frames in detectors:
        r = score(frames, non_speech, utterances)
        print(f"| {name} | {r['non_speech_frames_pct']:.1f} | {r['files_with_speech']}/{r['files']} | "
              f"{r['words_pct']:.1f} | {r['pauses_pct']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
