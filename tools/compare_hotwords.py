#!/usr/bin/env python3
"""The same phrase list as sherpa-onnx hotwords and as asrkit's context graph, on a
transducer exported by ``asrkit.bin.export_onnx``: both ``modified_beam_search`` over the
same features (those sherpa-onnx computes), with and without the phrases.

    python tools/make_hotwords.py --config exp/t/train.yaml phrases.txt exp/t/onnx/hotwords.txt
    python tools/compare_hotwords.py --config exp/t/train.yaml --checkpoint exp/t/avg_3.pt \\
        --onnx_dir exp/t/onnx --data_list data/test/data.list --phrases phrases.txt \\
        --hotwords exp/t/onnx/hotwords.txt --score 1.5 --out_dir exp/t/hotwords_test [--beam 4]

Writes Kaldi ``text`` files ``OUT_DIR/{sherpa,asrkit}_{plain,biased}`` (score them with
``tools/biasing_eval.py score`` and ``tools/compute_wer.py``) and prints one JSON line: per
side the number of utterances whose transcript the phrases changed, and how many of the
biased transcripts are the same on both sides.  asrkit's side: the encoder on the runtime's
features (``asrkit.export.sherpa_transducer.runtime_features``, the input adapter of the
export), :class:`asrkit.decode.transducer_search.ModifiedBeamSearch` with the context graph
of ``--phrases`` spelled by the model's tokenizer, ``--score`` per unit (sherpa-onnx's
``--hotwords-score``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import soundfile as sf
import torch

from asrkit.decode import DecodingOptions
from asrkit.decode.context_graph import read_phrase_list
from asrkit.decode.options import build_fusion
from asrkit.decode.transducer_search import ModifiedBeamSearch, TransducerSearcher
from asrkit.export.onnx_transducer import ENCODER_FILE, TOKENS_FILE
from asrkit.export.sherpa import read_metadata
from asrkit.export.sherpa_transducer import _files, adapter, runtime_features
from asrkit.files import atomic_write_text
from asrkit.trained_model import load_trained_model


def sherpa_recognizer(onnx_dir: Path, meta: dict, beam: int, hotwords: str = "", score: float = 1.5):
    import sherpa_onnx  # (deferred: optional dependency sherpa_onnx)
    return sherpa_onnx.OfflineRecognizer.from_transducer(
        tokens=str(onnx_dir / TOKENS_FILE), num_threads=1, dither=0.0,
        sample_rate=int(meta["asrkit_input_sample_rate"]), feature_dim=int(meta["asrkit_input_num_mel_bins"]),
        decoding_method="modified_beam_search", max_active_paths=beam, hotwords_file=hotwords,
        hotwords_score=score, **_files(onnx_dir, ENCODER_FILE, False))


def sherpa_text(recognizer, samples, rate) -> str:
    stream = recognizer.create_stream()
    stream.accept_waveform(rate, samples)
    recognizer.decode_stream(stream)
    return " ".join("".join(stream.result.tokens).split())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="the experiment's train.yaml")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--onnx_dir", required=True, type=Path)
    p.add_argument("--data_list", required=True)
    p.add_argument("--phrases", required=True)
    p.add_argument("--hotwords", required=True, help="tools/make_hotwords.py's file of the same phrases")
    p.add_argument("--score", type=float, default=1.5)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--strict", action="store_true",
                   help="asrkit's side matches with WeNet's strict rule (default: sherpa-onnx's non-strict one)")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--out_dir", required=True, type=Path)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    loaded = load_trained_model(args.config, args.checkpoint, overrides=args.override)
    model, tokenizer, feature_cmvn = loaded.model, loaded.tokenizer, loaded.feature_cmvn
    options = DecodingOptions(modes=("modified_beam_search",), beam_size=args.beam,
                              context_phrases=read_phrase_list(args.phrases), context_graph_score=args.score,
                              context_strict=args.strict)
    fusion = build_fusion(options, tokenizer)
    meta = read_metadata(_files(args.onnx_dir, ENCODER_FILE, False)["encoder"])
    norm = adapter(model, meta, feature_cmvn)
    searcher = TransducerSearcher.of_model(model)
    recognizers = {"plain": sherpa_recognizer(args.onnx_dir, meta, args.beam),
                   "biased": sherpa_recognizer(args.onnx_dir, meta, args.beam, str(args.hotwords), args.score)}
    items = [json.loads(line) for line in Path(args.data_list).read_text(encoding="utf-8").splitlines() if line]
    items = items[:args.limit] if args.limit > 0 else items
    texts = {f"{side}_{kind}": {} for side in ("sherpa", "asrkit") for kind in ("plain", "biased")}
    for item in items:
        samples, rate = sf.read(item["wav"], dtype="float32")
        for kind, recognizer in recognizers.items():
            texts[f"sherpa_{kind}"][item["key"]] = sherpa_text(recognizer, samples, rate)
        feats = runtime_features(meta, samples, rate)
        with torch.no_grad():
            out, _ = model.encoder(norm(feats.unsqueeze(0)), torch.tensor([feats.size(0)]))
            for kind, f in (("plain", None), ("biased", fusion)):
                search = ModifiedBeamSearch(searcher, torch.device("cpu"), beam_size=args.beam, fusion=f)
                search.feed(out[0])
                texts[f"asrkit_{kind}"][item["key"]] = tokenizer.decode(search.best().tokens)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, by_key in texts.items():
        atomic_write_text(args.out_dir / name, "".join(f"{k} {t}\n" for k, t in by_key.items()))
    keys = list(texts["sherpa_plain"])
    result = {"utterances": len(keys),
              "plain_identical": sum(texts["sherpa_plain"][k] == texts["asrkit_plain"][k] for k in keys),
              "biased_identical": sum(texts["sherpa_biased"][k] == texts["asrkit_biased"][k] for k in keys),
              "changed_by_phrases_sherpa": sum(texts["sherpa_plain"][k] != texts["sherpa_biased"][k] for k in keys),
              "changed_by_phrases_asrkit": sum(texts["asrkit_plain"][k] != texts["asrkit_biased"][k] for k in keys)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
