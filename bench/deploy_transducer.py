"""The transducer rows of ``bench/deploy_compare.py``: asrkit eager and TorchScript
(``final.zip``) on the training filterbank, the exported encoder/decoder/joiner under
onnxruntime (fp32, int8) and sherpa-onnx's ``from_transducer`` recognizers (public API),
offline and -- with ``onnx/encoder-streaming.onnx`` -- streaming.

sherpa-onnx computes its own filterbank and its greedy search emits at most one symbol per
frame, so the reference for "same" is asrkit's greedy search limited to one symbol per
frame on the features the runtime computes (:mod:`asrkit.export.sherpa_transducer`): offline
over the whole utterance, streaming over the windows sherpa-onnx reads, chunk by chunk.
The onnxruntime rows run that same search over the exported graphs (blank id 0 first in
the context, ``<unk>`` not advancing the context: sherpa-onnx's rules), so they separate
the graphs' numerics from the runtime's feature extraction.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, List

import numpy as np
import torch

from asrkit.decode import DecodingOptions, decode
from asrkit.export.onnx import int8_name, ort_session, session_runner
from asrkit.export.onnx_transducer import (DECODER_FILE, ENCODER_FILE, JOINER_FILE, STREAMING_ENCODER_FILE,
                                           TOKENS_FILE)
from asrkit.export.sherpa import read_metadata
from asrkit.export.sherpa_transducer import (adapter, asrkit_offline_tokens, asrkit_streaming_tokens,
                                             decode_offline, decode_streaming, offline_recognizer,
                                             online_recognizer, runtime_features, sherpa_symbols, tail_padding_s)

GREEDY = "rnnt_greedy_search"
ONE_SYMBOL = "greedy, 1 symbol/frame"


def symbols_text(symbols: List[str]) -> str:
    """Token symbols (``▁`` already a space) as words separated by one space."""
    return " ".join("".join(symbols).split())


class OnnxGreedy:
    """One-symbol-per-frame greedy search over the exported graphs under onnxruntime, on
    the runtime's features (what sherpa-onnx runs, less its feature extraction)."""

    def __init__(self, onnx_dir: Path, int8: bool):
        path = (lambda name: str(int8_name(onnx_dir / name)) if int8 else str(onnx_dir / name))
        self.encoder = session_runner(ort_session(path(ENCODER_FILE)))
        self.decoder = session_runner(ort_session(path(DECODER_FILE)))
        self.joiner = session_runner(ort_session(path(JOINER_FILE)))
        meta = read_metadata(path(DECODER_FILE))
        self.context_size = int(meta["context_size"])
        self.meta = read_metadata(path(ENCODER_FILE))

    def tokens(self, samples: np.ndarray, rate: int, unk: int) -> List[int]:
        feats = runtime_features(self.meta, samples, rate).unsqueeze(0)
        enc, lens = self.encoder(feats, torch.tensor([feats.size(1)], dtype=torch.int64))
        context = [-1] * (self.context_size - 1) + [0]
        (dec,) = self.decoder(torch.tensor([context], dtype=torch.int64))
        out: List[int] = []
        for t in range(int(lens[0])):
            (logits,) = self.joiner(torch.from_numpy(enc[:, t]), torch.from_numpy(dec))
            best = int(logits[0].argmax())
            if best != 0 and best != unk:
                out.append(best)
                context = context[1:] + [best]
                (dec,) = self.decoder(torch.tensor([context], dtype=torch.int64))
        return out


def transducer_engines(model, tokenizer, scripted, exp: Path, args, feats_of: Callable) -> list:
    """``(label, search, fn(samples, rate) -> text, file, reference)`` rows; ``reference``
    names the row whose texts "same" counts against (``offline``/``streaming``), ``None``
    for none; a row whose label starts with ``=`` *is* that reference."""
    onnx = exp / "onnx"
    units = [line.rsplit(" ", 1)[0] for line in (onnx / TOKENS_FILE).read_text(encoding="utf-8").splitlines()]
    unk = units.index("<unk>") if "<unk>" in units else -1
    text_of = (lambda ids: symbols_text(sherpa_symbols(ids, units)))

    def eager(mode):
        def run(samples, _rate):
            with torch.inference_mode():
                f = feats_of(samples).unsqueeze(0)
                ids = decode(model, f, torch.tensor([f.size(1)]), DecodingOptions(modes=[mode],
                                                                                  beam_size=args.beam_size))[mode][0]
            return text_of(ids)
        return run

    def torchscript(mode):
        def run(samples, _rate):
            with torch.inference_mode():
                f = feats_of(samples).unsqueeze(0)
                ids = scripted.decode(f, torch.tensor([f.size(1)]), beam_size=args.beam_size, modes=[mode])[mode][0]
            return text_of(ids)
        return run

    offline_meta = read_metadata(onnx / ENCODER_FILE)
    offline_norm = adapter(model, offline_meta)

    def eager_one_symbol(samples, rate):
        with torch.inference_mode():
            return text_of(asrkit_offline_tokens(model, offline_norm, runtime_features(offline_meta, samples, rate)))

    def ort(int8):
        search = OnnxGreedy(onnx, int8)
        return lambda samples, rate: text_of(search.tokens(samples, rate, unk))

    def sherpa_offline(int8):
        rec = offline_recognizer(onnx, int8=int8)
        return lambda samples, rate: symbols_text(decode_offline(rec, samples, rate))

    engines = [
        ("asrkit eager", GREEDY, eager(GREEDY), None, None),
        ("asrkit eager", "modified_beam_search", eager("modified_beam_search"), None, None),
        ("TorchScript final.zip", GREEDY, torchscript(GREEDY), "final.zip", None),
        ("=asrkit eager, runtime features", ONE_SYMBOL, eager_one_symbol, None, "offline"),
        ("onnxruntime fp32", ONE_SYMBOL, ort(False), ENCODER_FILE, "offline"),
        ("onnxruntime int8", ONE_SYMBOL, ort(True), int8_name(onnx / ENCODER_FILE).name, "offline"),
        ("sherpa-onnx offline fp32", ONE_SYMBOL, sherpa_offline(False), None, "offline"),
        ("sherpa-onnx offline int8", ONE_SYMBOL, sherpa_offline(True), None, "offline"),
    ]
    if (onnx / STREAMING_ENCODER_FILE).is_file():
        meta = read_metadata(onnx / STREAMING_ENCODER_FILE)
        norm, tail = adapter(model, meta), tail_padding_s(meta)
        note = f"chunk {meta['asrkit_chunk_size']}, {meta['asrkit_num_left_chunks']} left"

        def eager_streaming(samples, rate):
            padded = np.concatenate([samples, np.zeros(int(tail * rate), np.float32)])
            with torch.inference_mode():
                return text_of(asrkit_streaming_tokens(model, norm, runtime_features(meta, padded, rate), meta))

        def sherpa_streaming(int8):
            rec = online_recognizer(onnx, int8=int8)
            return lambda samples, rate: symbols_text(decode_streaming(rec, [(samples, rate)], tail)[0])

        engines += [
            (f"=asrkit eager, runtime features, {note}, fed as sherpa-onnx", ONE_SYMBOL, eager_streaming, None,
             "streaming"),
            (f"sherpa-onnx streaming fp32, {note}", ONE_SYMBOL, sherpa_streaming(False), STREAMING_ENCODER_FILE,
             "streaming"),
            (f"sherpa-onnx streaming int8, {note}", ONE_SYMBOL, sherpa_streaming(True),
             int8_name(onnx / STREAMING_ENCODER_FILE).name, "streaming"),
        ]
    return engines
