"""ONNX export of a transducer (``model: transducer``) for sherpa-onnx's transducer
recognizers: ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` (offline,
``OfflineRecognizer.from_transducer``), ``encoder-streaming.onnx`` (the online
``conformer`` layout, ``OnlineRecognizer.from_transducer``, with the same decoder and
joiner), ``*.int8.onnx`` copies and ``tokens.txt``.  The graphs are
:mod:`asrkit.export.onnx_transducer_graphs`; tracing, int8 quantization, tokens and
sessions are :mod:`asrkit.export.onnx`'s (one implementation with the CTC export).

**Features.**  sherpa-onnx computes kaldi-native-fbank itself.  ``OfflineRecognizer.
from_transducer`` sets only the sample rate, the number of bins and dither: samples stay in
[-1, 1] (``normalize_samples``), ``snip_edges`` false, ``high_freq`` −400 (Nyquist − 400 Hz),
``low_freq`` 20 (:data:`OFFLINE_RUNTIME`).  ``OnlineRecognizer.from_transducer`` takes
all of these, so :mod:`asrkit.export.sherpa_transducer` passes the training ones.  The
encoders take what the runtime computes and add ``2·ln(train_scale / input_scale)`` in the
graph when the sample scales differ (a model trained on 16-bit samples, asrkit's default,
read by the offline recognizer): exact except for bins at the runtime's energy floor
(log of float epsilon), whose training value is not recoverable.  ``snip_edges`` and
``high_freq`` cannot be undone in a graph: an offline export of a model trained with
other values than kaldi-native-fbank's defaults sees different frames and mel bins than in
training (:func:`feature_mismatch` says which; the export summary carries it).  The
metadata records both sides (``asrkit_train_*``, ``asrkit_input_*``).

**Checks.**  With ``verify``, each fp32 graph runs under onnxruntime against eager asrkit:
the offline encoder on a padded batch, the decoder on every context a search can feed
(``[-1, …, 0]`` and later windows), the joiner on random inputs, and the streaming encoder
driven exactly as sherpa-onnx drives it against asrkit's chunk-by-chunk forward.

**One symbol per frame.**  sherpa-onnx's transducer greedy search emits at most one symbol
per frame, asrkit's may emit several: on speech it is given (``check_audio``) the export
counts the frames where it does and says what follows (:mod:`asrkit.export.one_symbol_per_frame`).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from asrkit.data.features import INT16_SCALE
from asrkit.export.archive import ExportCheckError, inference_copy
from asrkit.export.onnx import (CHECK_TOLERANCE, _trace_to_onnx, check_streaming_encoder, keep_checked, ort_session,
                                padded_batch_difference, session_runner, write_tokens)
from asrkit.export.one_symbol_per_frame import search_mismatch, symbols_per_frame
from asrkit.export.onnx_transducer_graphs import (OfflineEncoder, StreamingEncoder, graphs,
                                                  log_shift, refuse_stateful_predictor)

ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder.onnx"
JOINER_FILE = "joiner.onnx"
STREAMING_ENCODER_FILE = "encoder-streaming.onnx"
TOKENS_FILE = "tokens.txt"
SHERPA_FRAME_MS = (25.0, 10.0)  # the only window / hop sherpa-onnx's Python API computes


@dataclasses.dataclass(frozen=True)
class Fbank:
    """A Kaldi filterbank's settings (lengths in ms; ``high_freq <= 0``: offset from
    Nyquist; ``sample_scale``: samples in [-1, 1] are multiplied by it first).  The default
    is asrkit's training filterbank (:func:`asrkit.data.features.compute_fbank`)."""

    sample_rate: int = 16000
    num_mel_bins: int = 80
    frame_length: float = 25.0
    frame_shift: float = 10.0
    low_freq: float = 20.0
    high_freq: float = 0.0
    snip_edges: bool = True
    sample_scale: float = float(INT16_SCALE)

    @classmethod
    def from_config(cls, cfg) -> "Fbank":
        """The training filterbank of a config: ``fbank_conf``'s options where it has them
        (``snip_edges``, ``high_freq``, ``low_freq``, ``sample_scale``), asrkit's defaults
        otherwise."""
        conf = cfg.dataset_conf.fbank_conf
        base = cls()
        values = {f.name: getattr(conf, f.name, getattr(base, f.name)) for f in dataclasses.fields(cls)}
        values["sample_rate"] = cfg.dataset_conf.resample_conf.resample_rate
        values["frame_length"], values["frame_shift"] = conf.frame_length, conf.frame_shift
        return cls(**values)

    def metadata(self, prefix: str) -> Dict[str, str]:
        return {f"{prefix}{f.name}": str(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_metadata(cls, meta: Dict[str, str], prefix: str) -> "Fbank":
        values = {}
        for f in dataclasses.fields(cls):
            raw = meta[f"{prefix}{f.name}"]
            values[f.name] = raw == "True" if f.type in ("bool", bool) else type(getattr(cls(), f.name))(float(raw))
        return cls(**values)

    def compute(self, samples: np.ndarray | torch.Tensor, sample_rate: int) -> torch.Tensor:
        """``[frames, num_mel_bins]`` of float samples in [-1, 1) with these settings (dither 0,
        energy floor 0, povey window: kaldi-native-fbank's and Kaldi's computation)."""
        import torchaudio.compliance.kaldi as kaldi
        if sample_rate != self.sample_rate:
            raise ValueError(f"audio at {sample_rate} Hz, the filterbank is for {self.sample_rate} Hz")
        wav = torch.as_tensor(np.asarray(samples, dtype=np.float32)).reshape(1, -1) * self.sample_scale
        return kaldi.fbank(wav, num_mel_bins=self.num_mel_bins, frame_length=self.frame_length,
                           frame_shift=self.frame_shift, dither=0.0, energy_floor=0.0,
                           sample_frequency=float(self.sample_rate), snip_edges=self.snip_edges,
                           low_freq=self.low_freq, high_freq=self.high_freq)


def offline_runtime(train: Fbank) -> Fbank:
    """What ``OfflineRecognizer.from_transducer`` computes for a model trained on ``train``:
    kaldi-native-fbank's defaults at the training rate and bin count."""
    return Fbank(sample_rate=train.sample_rate, num_mel_bins=train.num_mel_bins, low_freq=20.0, high_freq=-400.0,
                 snip_edges=False, sample_scale=1.0)


def online_runtime(train: Fbank) -> Fbank:
    """What :func:`asrkit.export.sherpa_transducer.online_recognizer` makes
    ``OnlineRecognizer.from_transducer`` compute: the training filterbank, samples in
    [-1, 1] unless training scaled them to 16 bits (``normalize_samples=False``)."""
    scale = train.sample_scale if train.sample_scale in (1.0, float(INT16_SCALE)) else 1.0
    return dataclasses.replace(train, sample_scale=scale)


OFFLINE_RUNTIME = offline_runtime(Fbank())


def feature_mismatch(train: Fbank, runtime: Fbank) -> List[str]:
    """The settings the runtime computes differently from training that a graph cannot
    undo (the sample scale it can)."""
    return [f"{name} {getattr(runtime, name)} (trained with {getattr(train, name)})"
            for name in ("snip_edges", "high_freq", "low_freq") if getattr(runtime, name) != getattr(train, name)]


def _check_sherpa_frames(fbank: Fbank) -> None:
    if (fbank.frame_length, fbank.frame_shift) != SHERPA_FRAME_MS:
        raise ValueError(f"the model was trained with {fbank.frame_length:g} ms / {fbank.frame_shift:g} ms frames; "
                         f"sherpa-onnx's Python API computes 25 ms / 10 ms frames only")


def _fbank_metadata(train: Fbank, runtime: Fbank) -> Dict[str, str]:
    meta = {**train.metadata("asrkit_train_"), **runtime.metadata("asrkit_input_")}
    meta["asrkit_log_shift"] = f"{log_shift(train.sample_scale, runtime.sample_scale):.9g}"
    return meta


def decoder_metadata(model: nn.Module) -> Dict[str, str]:
    return {"model_type": "conformer", "vocab_size": str(int(model.vocab_size)),
            "context_size": str(int(model.predictor.context_size)), "model_author": "asrkit",
            "asrkit_predictor": type(model.predictor).__name__}


def streaming_geometry(model: nn.Module, chunk: int, num_left_chunks: int) -> Dict[str, int]:
    """sherpa-onnx's online ``conformer`` numbers for ``chunk`` encoder frames per window and
    ``num_left_chunks`` chunks of attention cache."""
    encoder = model.encoder
    check_streaming_encoder(encoder)
    rate, context = int(encoder.embed.rate), int(encoder.embed.right_context)
    window = (chunk - 1) * rate + context + 1
    kernels = [layer.conv_module.depthwise_conv.kernel_size[0] for layer in encoder.encoders
               if getattr(layer, "conv_module", None) is not None]
    return {"num_encoder_layers": len(encoder.encoders), "T": window, "decode_chunk_len": chunk * rate,
            "left_context": chunk * num_left_chunks, "encoder_dim": int(encoder.output_size()),
            "pad_length": window - chunk * rate, "cnn_module_kernel": int(kernels[0]) if kernels else 1}


def streaming_metadata(model: nn.Module, chunk: int, num_left_chunks: int) -> Dict[str, str]:
    meta = {"model_type": "conformer", "model_author": "asrkit", "comment": "streaming U2++ transducer encoder"}
    meta.update({k: str(v) for k, v in streaming_geometry(model, chunk, num_left_chunks).items()})
    meta.update({"asrkit_chunk_size": str(chunk), "asrkit_num_left_chunks": str(num_left_chunks),
                 "asrkit_subsampling_factor": str(int(model.encoder.embed.rate)),
                 "asrkit_output_size": str(int(model.encoder.output_size())),
                 "asrkit_attention_heads": str(int(model.encoder.attention_heads)),
                 "asrkit_attn_cache": "per layer [left_context, N, D]: the self-attention's inputs (layer-normed "
                                      "frames) of the frames before the chunk; keys and values recomputed"})
    return meta


# ------------------------------------------------------------------ sherpa-onnx's protocols


def initial_states(meta: Dict[str, str], n: int = 1) -> Tuple[torch.Tensor, torch.Tensor]:
    """The zero caches sherpa-onnx starts a stream with (``GetEncoderInitStates``)."""
    layers, d = int(meta["num_encoder_layers"]), int(meta["encoder_dim"])
    return (torch.zeros(layers, int(meta["left_context"]), n, d),
            torch.zeros(layers, int(meta["cnn_module_kernel"]) - 1, n, d))


def stream_encoder(run: Callable[..., Sequence], feats: torch.Tensor, meta: Dict[str, str]) -> torch.Tensor:
    """Encoder frames ``[1, frames, J]`` of ``feats [T, F]`` (what the runtime computed)
    through a streaming encoder called as ``run(x, attn_cache, conv_cache,
    processed_frames)``, exactly as sherpa-onnx's ``OnlineRecognizerTransducerImpl`` does:
    a window of ``T`` frames whenever more than ``processed + T`` frames are ready,
    advancing ``decode_chunk_len``; zero caches fed back as returned."""
    window, shift = int(meta["T"]), int(meta["decode_chunk_len"])
    attn, conv = initial_states(meta)
    outputs: List[torch.Tensor] = []
    processed = 0
    while processed + window < feats.size(0):
        x = feats[processed:processed + window].unsqueeze(0).contiguous()
        out, attn, conv = (torch.as_tensor(y) for y in run(x, attn, conv, torch.tensor([processed])))
        outputs.append(out)
        processed += shift
    return torch.cat(outputs, dim=1) if outputs else torch.zeros(1, 0, 0)


def frames_used(num_frames: int, meta: Dict[str, str]) -> int:
    """Feature frames the windows of :func:`stream_encoder` read (0: none)."""
    window, shift = int(meta["T"]), int(meta["decode_chunk_len"])
    if num_frames <= window:
        return 0
    return ((num_frames - window - 1) // shift) * shift + window


def eager_streaming_encoder(model: nn.Module, adapter: nn.Module, feats: torch.Tensor, chunk: int,
                            num_left_chunks: int, meta: Dict[str, str]) -> torch.Tensor:
    """asrkit's chunk-by-chunk encoder (unprojected, ``[1, frames, D]``) over the frames the
    sherpa-onnx windows of ``feats`` read."""
    used = frames_used(feats.size(0), meta)
    if not used:
        return torch.zeros(1, 0, int(model.encoder.output_size()))
    with torch.no_grad():
        out, _ = model.encoder.forward_chunk_by_chunk(adapter(feats[:used].unsqueeze(0)), chunk, num_left_chunks)
    return out


# ------------------------------------------------------------------ checks against eager asrkit


def _worst(got, want) -> float:
    return float((torch.as_tensor(got) - want).abs().max()) if want.numel() else 0.0


def _check_offline_encoder(path: Path, graph: OfflineEncoder, bins: int) -> float:
    return padded_batch_difference(path, graph, bins, -5.0)  # (the runtime's [-1, 1]-scale log-mel values)


def decoder_contexts(context_size: int, vocab_size: int, blank: int, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Every window sherpa-onnx can feed along one random token sequence (blank first), and
    what asrkit's predictor gives there, stepped from its initial state:
    ``(y [U, context_size], predictor_out [U, P])``."""
    generator = torch.Generator().manual_seed(seed)
    tokens = [blank] + torch.randint(0, vocab_size, (2 * context_size + 3,), generator=generator).tolist()
    history = [-1] * (context_size - 1) + tokens
    y = torch.tensor([history[u:u + context_size] for u in range(len(tokens))], dtype=torch.int64)
    return y, torch.tensor(tokens)


def _check_decoder(path: Path, model: nn.Module) -> float:
    run = session_runner(ort_session(path))
    y, tokens = decoder_contexts(int(model.predictor.context_size), int(model.vocab_size), int(model.blank_id))
    with torch.no_grad():  # asrkit's own path: forward_step from init_state, as the searches use it
        state = model.predictor.init_state(1, torch.device("cpu"))
        steps = []
        for token in tokens.tolist():
            out, state = model.predictor.forward_step(torch.tensor([[token]]), torch.zeros(1, 1), state)
            steps.append(model.joint.project_predictor(out[0, 0]))
        want = torch.stack(steps)
    (got,) = run(y)
    return _worst(got, want)


def _check_joiner(path: Path, model: nn.Module, join_dim: int) -> float:
    run = session_runner(ort_session(path))
    generator = torch.Generator().manual_seed(2)
    enc, dec = (torch.randn(5, join_dim, generator=generator) for _ in range(2))
    (got,) = run(enc, dec)
    with torch.no_grad():
        want = model.joint(enc.view(5, 1, 1, -1), dec.view(5, 1, 1, -1), pre_project=False).reshape(5, -1)
    return _worst(got, want)


def _check_streaming(path: Path, model: nn.Module, adapter: nn.Module, meta: Dict[str, str], bins: int,
                     chunk: int, left: int) -> float:
    run = session_runner(ort_session(path))
    feats = torch.randn(700, bins, generator=torch.Generator().manual_seed(1)) * 3 - 5
    got = stream_encoder(run, feats, meta)
    with torch.no_grad():
        want = model.joint.project_encoder(eager_streaming_encoder(model, adapter, feats, chunk, left, meta))
    if got.shape != want.shape:
        raise ExportCheckError(f"{path.name}: streamed {tuple(got.shape)} frames, eager {tuple(want.shape)}")
    return _worst(got, want)


# ------------------------------------------------------------------ export


def export_transducer_onnx(model: nn.Module, units: Sequence[str], output_dir: Path | str, *,
                           fbank: Fbank = Fbank(),
                           feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                           streaming: bool = False, chunk_size: int = 16, num_left_chunks: int = 4,
                           int8: bool = True, verify: bool = True,
                           tolerance: float = CHECK_TOLERANCE,
                           check_audio: Optional[Sequence[Tuple[np.ndarray | torch.Tensor, int]]] = None
                           ) -> Dict[str, object]:
    """Write the transducer's graphs for sherpa-onnx into ``output_dir`` (module
    docstring): ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx``, with ``streaming``
    also ``encoder-streaming.onnx`` (``chunk_size`` encoder frames per window,
    ``num_left_chunks`` chunks of attention cache, both fixed in its metadata), each with
    ``*.int8.onnx`` when ``int8``, and ``tokens.txt``.

    ``model``: a transducer with a stateless predictor (``embedding``, ``conv``); an ``rnn``
    predictor is refused with ``ValueError``, as is a streaming export of an encoder whose
    convolution is not causal.  ``fbank``: the training filterbank (:meth:`Fbank.from_config`).
    ``feature_cmvn``: a data-pipeline CMVN to put inside.  With ``verify`` every fp32 file is
    compared with eager asrkit under onnxruntime (:class:`~asrkit.export.archive.ExportCheckError`
    beyond ``tolerance``).  ``check_audio``: ``(samples in [-1, 1), sample_rate)`` of speech
    at the training rate, on which the frames where asrkit's greedy search emits more than
    one symbol are counted before anything is traced (module docstring; ``None`` or empty:
    not counted).  Returns a summary: files and sizes, the checks' largest differences,
    ``feature_mismatch`` (what the offline runtime computes differently from training),
    ``symbols_per_frame`` (:func:`symbols_per_frame` on ``check_audio``, or ``None``),
    ``search_mismatch`` (:func:`search_mismatch`: ``None``, or the line saying that
    sherpa-onnx's transcripts can differ and why), seconds."""
    refuse_stateful_predictor(model)
    _check_sherpa_frames(fbank)
    if len(units) != model.vocab_size:
        raise ValueError(f"{len(units)} units, the model has {model.vocab_size} outputs")
    if int(model.blank_id) != 0:
        raise ValueError(f"sherpa-onnx's transducer searches take id 0 as the blank; the model's blank is "
                         f"{int(model.blank_id)}")
    model = inference_copy(model)
    offline_input = offline_runtime(fbank)
    offline_adapter, decoder, joiner = graphs(model, feature_cmvn, log_shift(fbank.sample_scale,
                                                                             offline_input.sample_scale))
    counts = (symbols_per_frame(model, offline_adapter.normalizer, [fbank.compute(samples, rate)
                                                                    for samples, rate in check_audio])
              if check_audio else None)
    streaming_graph = None
    if streaming:
        online_input = online_runtime(fbank)
        online_adapter, _, _ = graphs(model, feature_cmvn, log_shift(fbank.sample_scale, online_input.sample_scale))
        streaming_graph = StreamingEncoder(model, online_adapter, chunk_size, chunk_size * num_left_chunks).eval()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bins, join_dim = fbank.num_mel_bins, int(model.joint.ffn_out.in_features)
    summary: Dict[str, object] = {"files": {}, "max_abs_diff": {},
                                  "feature_mismatch": feature_mismatch(fbank, offline_input),
                                  "symbols_per_frame": counts, "search_mismatch": search_mismatch(model, counts)}
    encoder = OfflineEncoder(model, offline_adapter).eval()
    encoder_meta = {"model_type": "conformer", "model_author": "asrkit", "comment": "offline transducer encoder",
                    **_fbank_metadata(fbank, offline_input)}
    context = int(model.predictor.context_size)
    jobs: List[Tuple[nn.Module, Path, tuple, List[str], List[str], dict, Dict[str, str], Callable]] = [
        (encoder, out / ENCODER_FILE,
         (torch.randn(1, 200, bins), torch.tensor([200], dtype=torch.int64)), ["x", "x_lens"],
         ["encoder_out", "encoder_out_lens"],
         {"x": {0: "N", 1: "T"}, "x_lens": {0: "N"}, "encoder_out": {0: "N", 1: "T_out"},
          "encoder_out_lens": {0: "N"}}, encoder_meta,
         lambda p: _check_offline_encoder(p, encoder, bins)),
        (decoder.eval(), out / DECODER_FILE, (torch.zeros(1, context, dtype=torch.int64),), ["y"], ["decoder_out"],
         {"y": {0: "N"}, "decoder_out": {0: "N"}}, decoder_metadata(model), lambda p: _check_decoder(p, model)),
        (joiner.eval(), out / JOINER_FILE, (torch.zeros(1, join_dim), torch.zeros(1, join_dim)),
         ["encoder_out", "decoder_out"], ["logit"],
         {"encoder_out": {0: "N"}, "decoder_out": {0: "N"}, "logit": {0: "N"}},
         {"model_type": "conformer", "joiner_dim": str(join_dim), "model_author": "asrkit"},
         lambda p: _check_joiner(p, model, join_dim)),
    ]
    if streaming_graph is not None:
        meta = {**streaming_metadata(model, chunk_size, num_left_chunks), **_fbank_metadata(fbank, online_input)}
        attn, conv = initial_states(meta)
        jobs.append((streaming_graph, out / STREAMING_ENCODER_FILE,
                     (torch.randn(1, int(meta["T"]), bins), attn, conv, torch.tensor([0], dtype=torch.int64)),
                     ["x", "attn_cache", "conv_cache", "processed_frames"],
                     ["encoder_out", "next_attn_cache", "next_conv_cache"],
                     {"x": {0: "N"}, "attn_cache": {2: "N"}, "conv_cache": {2: "N"}, "processed_frames": {0: "N"},
                      "encoder_out": {0: "N"}, "next_attn_cache": {2: "N"}, "next_conv_cache": {2: "N"}}, meta,
                     lambda p, m=meta: _check_streaming(p, model, streaming_graph.adapter, m, bins, chunk_size,
                                                        num_left_chunks)))
    for graph, path, example, inputs, outputs, axes, meta, check in jobs:
        _trace_to_onnx(graph, example, path, inputs, outputs, axes, meta)
        keep_checked(path, meta, check if verify else None, int8, summary, tolerance)
    write_tokens(units, int(model.blank_id), out / TOKENS_FILE)
    summary["seconds"] = time.perf_counter() - started
    return summary
