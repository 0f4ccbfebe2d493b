#!/usr/bin/env python3
"""One model, every way out of asrkit: CER and real-time factor of asrkit eager,
TorchScript (final.zip), ONNX fp32/int8 under onnxruntime and sherpa-onnx offline and
streaming, on one thread, one utterance at a time, plus the file sizes.

    bench/deploy_compare.py --exp exp/u2pp_cpu --checkpoint exp/u2pp_cpu/avg_3.pt \
        --data data/test/data.list [--chunk 16 --left_chunks 4] [--max_utts 0] [--json out.json]

``--exp`` holds ``train.yaml``, ``final.zip`` and ``onnx/`` (stage 6 of a recipe).  RTF =
wall time per utterance (audio already in memory; features, model and search included)
/ audio seconds.  sherpa-onnx is driven through its public API only, and computes its own
filterbank (kaldi-native-fbank: ``snip_edges`` false, top mel edge at Nyquist − 400 Hz).
"same" counts the utterances whose text equals the row's reference (marked ``(reference)``).

CTC/attention models: the greedy CTC rows are what sherpa-onnx can do (``from_wenet_ctc``),
asrkit's ``attention_rescoring`` is there for what that costs; the reference is asrkit's
greedy CTC search (eager: full context for the offline rows; at the streaming chunk for
the masked forward over the whole utterance; for sherpa-onnx's streaming rows the chunked
forward over what its recognizer decodes -- the audio with the tail padding, whole windows
only -- the row "fed as sherpa-onnx").  For a model trained on other features than the
runtime computes, sherpa-onnx's rows are marked ``(features differ)`` -- built anyway, to
measure what the mismatch costs.  Streaming rows (chunk and left chunks as given) appear
for a model with ``onnx/model-streaming.onnx``.

Transducers (``model: transducer``): :mod:`bench.deploy_transducer` (its docstring says
which rows and references; sherpa-onnx's ``from_transducer``, one symbol per frame;
streaming at the chunk the export chose, for ``onnx/encoder-streaming.onnx``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from asrkit.config import load_config
from asrkit.data.features import compute_fbank, fbank_options
from asrkit.data.lists import read_list
from asrkit.decode import DecodingOptions, decode
from asrkit.trained_model import build_trained_model
from asrkit.export import load_exported
from asrkit.export.onnx import (OFFLINE_FILE, STREAMING_FILE, eager_stream_reference, int8_name, ort_session,
                                session_runner)
from asrkit.export.sherpa import (TAIL_PADDING_S, FeatureMismatchWarning, check_runtime_features, decode_offline,
                                  decode_streaming, offline_recognizer, online_recognizer, read_metadata)
from asrkit.config_files import load_text_inputs
from asrkit.metrics import score
if __package__ in (None, ""):  # run by its path: the repository root importable, as under `python -m`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.deploy_transducer import transducer_engines


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exp", required=True, help="experiment dir with train.yaml, final.zip and onnx/")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="raw data.list (wav, txt, duration)")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--chunk", type=int, default=16, help="streaming chunk (encoder frames)")
    p.add_argument("--left_chunks", type=int, default=4)
    p.add_argument("--beam_size", type=int, default=10)
    p.add_argument("--ctc_weight", type=float, default=0.3)
    p.add_argument("--reverse_weight", type=float, default=0.0)
    p.add_argument("--max_utts", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the rows as JSON here")
    return p.parse_args(argv)


def timed(fn: Callable[[np.ndarray, int], str], audio, rate: int) -> tuple[dict, float]:
    """Texts by key and total seconds; three warm-up calls first (not counted: TorchScript's
    profiling executor optimises after its first calls)."""
    for _, samples in audio[:3]:
        fn(samples, rate)
    texts, seconds = {}, 0.0
    for key, samples in audio:
        t0 = time.perf_counter()
        texts[key] = fn(samples, rate)
        seconds += time.perf_counter() - t0
    return texts, seconds


def ctc_engines(exp: Path, args, eager, eager_as_sherpa_streams, torchscript, onnxruntime) -> list:
    """The CTC model's rows, as :func:`bench.deploy_transducer.transducer_engines` describes
    them; "same" counts against asrkit's greedy CTC search offline, at the streaming chunk,
    and fed as sherpa-onnx's streaming recognizer decodes."""
    onnx = exp / "onnx"
    streaming = (onnx / STREAMING_FILE).is_file()
    chunk_note = f"chunk {args.chunk}, {args.left_chunks} left"
    greedy = "ctc_greedy_search"
    engines = [
        ("asrkit eager", "attention_rescoring", eager("attention_rescoring"), "final.zip", None),
        ("=asrkit eager", greedy, eager(greedy), None, "offline"),
        ("TorchScript final.zip", "attention_rescoring", torchscript("attention_rescoring"), "final.zip", None),
        ("TorchScript final.zip", greedy, torchscript(greedy), None, "offline"),
        ("onnxruntime fp32", greedy, onnxruntime(onnx / OFFLINE_FILE), OFFLINE_FILE, "offline"),
        ("onnxruntime int8", greedy, onnxruntime(int8_name(onnx / OFFLINE_FILE)), int8_name(onnx / OFFLINE_FILE).name,
         "offline"),
    ]
    differ = ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FeatureMismatchWarning)
        check_runtime_features(read_metadata(onnx / OFFLINE_FILE), allow_mismatch=True)
    if caught:
        differ = " (features differ)"
        print(f"warning: {caught[0].message}", file=sys.stderr)
    for label, model_file in ((f"sherpa-onnx offline fp32{differ}", OFFLINE_FILE),
                              (f"sherpa-onnx offline int8{differ}", int8_name(onnx / OFFLINE_FILE).name)):
        rec = offline_recognizer(onnx, model=model_file, allow_feature_mismatch=bool(differ))
        engines.append((label, greedy, lambda s, r, rec=rec: decode_offline(rec, s, r).text, None, "offline"))
    if streaming:
        engines += [(f"=asrkit eager, {chunk_note}", greedy, eager(greedy, args.chunk, args.left_chunks), None, "chunk"),
                    (f"asrkit eager, {chunk_note}", "attention_rescoring",
                     eager("attention_rescoring", args.chunk, args.left_chunks), None, None),
                    (f"=asrkit eager, {chunk_note}, fed as sherpa-onnx", greedy,
                     eager_as_sherpa_streams(args.chunk, args.left_chunks), None, "fed")]
        for label, model_file in ((f"fp32{differ}", STREAMING_FILE),
                                  (f"int8{differ}", int8_name(onnx / STREAMING_FILE).name)):
            rec = online_recognizer(onnx, model=model_file, chunk_size=args.chunk, num_left_chunks=args.left_chunks,
                                    allow_feature_mismatch=bool(differ))
            engines.append((f"sherpa-onnx streaming {label}, {chunk_note}", greedy,
                            lambda s, r, rec=rec: decode_streaming(rec, s, r), model_file, "fed"))
    return engines


def measure(engines: list, audio, refs: dict, rate: int, exp: Path) -> list:
    """Run every engine row over ``audio``, print the table; the rows as dicts.  A label
    starting with ``=`` is the reference its ``reference`` key names (it runs before the
    rows compared with it); "same" counts the utterances whose text equals it."""
    audio_s = sum(len(a) for _, a in audio) / rate
    rows, reference_texts = [], {}
    print(f"{len(audio)} utterances, {audio_s:.1f} s of audio, 1 thread\n")
    print("| engine | search | CER % | same as the reference | RTF | file (MB) |\n"
          "| --- | --- | --- | --- | --- | --- |")
    for label, search, fn, file, reference in engines:
        texts, seconds = timed(fn, audio, rate)
        totals, _ = score(refs, texts, mode="char")
        size = ((exp / file) if file == "final.zip" else exp / "onnx" / file).stat().st_size / 1e6 if file else None
        is_reference = label.startswith("=")
        label = label.lstrip("=")
        if is_reference:
            reference_texts[reference] = texts
        same = (sum(texts[k] == reference_texts[reference][k] for k in texts)
                if reference in reference_texts else None)
        row = {"engine": label, "search": search, "cer": 100.0 * totals.rate, "same_as_reference": same,
               "reference": reference, "is_reference": is_reference, "utterances": len(texts),
               "rtf": seconds / audio_s, "mb": size}
        rows.append(row)
        shown = "(reference)" if is_reference else "" if same is None else f"{same}/{len(texts)}"
        print(f"| {label} | {search} | {row['cer']:.2f} | {shown} | {row['rtf']:.4f} | "
              f"{'' if size is None else f'{size:.1f}'} |", flush=True)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    exp = Path(args.exp)
    cfg = load_config(exp / "train.yaml", args.override)
    tokenizer = load_text_inputs(cfg, model_cmvn=False)
    model = build_trained_model(cfg, args.checkpoint, tokenizer.vocabulary)
    fb = cfg.dataset_conf.fbank_conf
    rate = cfg.dataset_conf.resample_conf.resample_rate
    import soundfile as sf
    entries = read_list(args.data)
    if args.max_utts:
        entries = entries[:args.max_utts]
    audio = [(e.key, sf.read(e.wav, dtype="float32")[0]) for e in entries]
    refs = {e.key: e.txt for e in entries}

    def feats_of(samples):
        return compute_fbank(torch.from_numpy(samples).unsqueeze(0), rate, **fbank_options(fb))

    def eager(mode, chunk=0, left=-1):
        def run(samples, _rate):
            with torch.inference_mode():
                f = feats_of(samples).unsqueeze(0)
                options = DecodingOptions(modes=[mode], beam_size=args.beam_size, ctc_weight=args.ctc_weight,
                                          reverse_weight=args.reverse_weight, decoding_chunk_size=chunk,
                                          num_decoding_left_chunks=left)
                ids = decode(model, f, torch.tensor([f.size(1)]), options)[mode][0]
            return tokenizer.decode(ids)
        return run

    def eager_as_sherpa_streams(chunk, left):
        """Greedy search of asrkit's chunked forward over what sherpa-onnx's streaming
        recognizer decodes: the audio with decode_streaming's tail padding, the windows that
        fit in its frames (:func:`asrkit.export.onnx.stream_log_probs`'s rule)."""
        rate_, context = model.encoder.subsampling_rate, model.encoder.embed.right_context
        window, shift = (chunk - 1) * rate_ + context + 1, chunk * rate_
        normalize = model.cmvn if model.cmvn is not None else (lambda x: x)

        def run(samples, _rate):
            padded = np.concatenate([samples, np.zeros(int(TAIL_PADDING_S * rate), np.float32)])
            f = feats_of(padded)
            windows = max(0, -(-(f.size(0) - window) // shift))
            with torch.inference_mode():
                log_probs = eager_stream_reference(model, f, normalize, chunk, left, windows * chunk)
            ids = torch.unique_consecutive(log_probs[0].argmax(-1)).tolist()
            return tokenizer.decode([i for i in ids if i != blank])
        return run

    scripted, _ = load_exported(exp / "final.zip")

    def torchscript(mode):
        def run(samples, _rate):
            with torch.inference_mode():
                f = feats_of(samples).unsqueeze(0)
                ids = scripted.decode(f, torch.tensor([f.size(1)]), beam_size=args.beam_size,
                                      ctc_weight=args.ctc_weight, reverse_weight=args.reverse_weight,
                                      modes=[mode])[mode][0]
            return tokenizer.decode(ids)
        return run

    blank = int(model.blank_id)

    def onnxruntime(path):
        ort_run = session_runner(ort_session(path))

        def run(samples, _rate):
            f = feats_of(samples).unsqueeze(0)
            log_probs, _ = ort_run(f, torch.tensor([f.size(1)]))
            ids = [i for i in torch.unique_consecutive(torch.from_numpy(log_probs[0]).argmax(-1)).tolist()
                   if i != blank]
            return tokenizer.decode(ids)
        return run

    if cfg.model == "transducer":
        engines = transducer_engines(model, tokenizer, scripted, exp, args, feats_of)
    else:
        engines = ctc_engines(exp, args, eager, eager_as_sherpa_streams, torchscript, onnxruntime)
    rows = measure(engines, audio, refs, rate, exp)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
