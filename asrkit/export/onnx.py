"""ONNX export for sherpa-onnx (``OfflineRecognizer.from_wenet_ctc`` /
``OnlineRecognizer.from_wenet_ctc``): the graphs of :mod:`asrkit.export.onnx_graphs`,
the metadata sherpa-onnx reads, ``tokens.txt``, optional int8 dynamic quantization, and
a check of every written file against eager asrkit under onnxruntime.

The exporter is torch's TorchScript-based one (``torch.onnx.export(..., dynamo=False)``),
chosen deliberately: it traces the model's own Python code with dynamic axes (the
subsampling, masks and positional tables follow the input's length), needs nothing beyond
``onnx``, and the torch.export-based default refuses the encoder's data-dependent input
check.  Positional tables are computed in the graph (no length limit, no table
initializers).  :func:`stream_log_probs` drives a streaming model exactly as sherpa-onnx's
``OnlineRecognizerCtcImpl`` does (windows, offset starting at ``R``, its mask); the
export check, the tests and the benchmarks all use it.
"""
from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from asrkit.export.archive import ExportCheckError, inference_copy
from asrkit.export.onnx_graphs import OfflineCtcGraph, StreamingCtcGraph
from asrkit.export.runtime_features import runtime_feature_mismatch
from asrkit.files import atomic_write_bytes, atomic_write_text
from asrkit.models.branchformer import BranchformerEncoder
from asrkit.models.e_branchformer import EBranchformerEncoder
from asrkit.models.efficient_conformer import EfficientConformerEncoder
from asrkit.models.squeezeformer import SqueezeformerEncoder

OPSET = 17
OFFLINE_FILE = "model.onnx"
STREAMING_FILE = "model-streaming.onnx"
TOKENS_FILE = "tokens.txt"
CHECK_TOLERANCE = 1e-4
BLANK_NAMES = ("<blk>", "<eps>", "<blank>")  # what sherpa-onnx looks up for the CTC blank
FBANK_DEFAULTS = {"sample_rate": 16000, "num_mel_bins": 80, "frame_length_ms": 25.0, "frame_shift_ms": 10.0,
                  "low_freq": 20.0, "high_freq": 0.0, "snip_edges": True, "sample_scale": 32768.0}


def fbank_metadata(fbank: Dict[str, object]) -> Dict[str, str]:
    """``asrkit_*`` metadata of the filterbank ``fbank`` (keys of :data:`FBANK_DEFAULTS`;
    those missing take their default): numbers as ``%g``, ``snip_edges`` as
    ``true``/``false``, and ``asrkit_fbank``, the same in words."""
    fbank = dict(FBANK_DEFAULTS, **fbank)
    meta = {f"asrkit_{key}": (("true" if value else "false") if isinstance(value, bool) else f"{value:g}")
            for key, value in fbank.items()}
    high = float(fbank["high_freq"])
    meta["asrkit_fbank"] = (f"kaldi povey window, snip_edges {meta['asrkit_snip_edges']}, mel bins from "
                            f"{float(fbank['low_freq']):g} Hz to "
                            + ("Nyquist" if high == 0 else f"Nyquist - {-high:g} Hz" if high < 0 else f"{high:g} Hz")
                            + f", samples x {float(fbank['sample_scale']):g}, no dither")
    return meta


def fbank_from_metadata(meta: Dict[str, str]) -> Dict[str, object]:
    """The filterbank :func:`fbank_metadata` recorded (keys of :data:`FBANK_DEFAULTS`); a
    key a file lacks (exported before it was recorded) takes its default, what asrkit
    computed then."""
    fbank: Dict[str, object] = {}
    for key, default in FBANK_DEFAULTS.items():
        value = meta.get(f"asrkit_{key}")
        if value is None:
            fbank[key] = default
        elif isinstance(default, bool):
            fbank[key] = value.strip().lower() in ("true", "1")
        else:
            fbank[key] = type(default)(float(value))
    return fbank


def int8_name(path: Path) -> Path:
    """``model.onnx -> model.int8.onnx`` (sherpa-onnx's naming)."""
    return path.with_name(path.stem + ".int8" + path.suffix)


def check_streaming_encoder(encoder: nn.Module) -> None:
    """ValueError (one line) unless ``encoder`` has the caches sherpa-onnx's streaming layout
    holds -- the transformer's and the conformer's (one ``cnn_module_kernel − 1`` convolution
    cache of ``output_size`` channels per block).  A Branchformer's or an E-Branchformer's cgMLP
    cache has ``cgmlp_linear_units / 2`` channels (and the E-Branchformer's merge convolution
    streams without a cache, as WeNet's, so its chunks are not the masked forward the export
    checks against): their streaming export is not implemented.  A Squeezeformer's blocks run at
    different frame rates (time reduction): its attention caches do not share one shape; so do an
    Efficient Conformer's after its strided blocks (and their convolution kernels differ)."""
    if isinstance(encoder, EfficientConformerEncoder):
        raise ValueError("streaming ONNX export of encoder efficientConformer is not implemented (its strided blocks "
                         "run the later blocks at lower frame rates, with smaller kernels: sherpa-onnx's layout has "
                         "one cache shape for every block)")
    if isinstance(encoder, SqueezeformerEncoder):
        raise ValueError("streaming ONNX export of encoder squeezeformer is not implemented (its time reduction "
                         "runs blocks at different frame rates: sherpa-onnx's layout has one cache shape for every "
                         "block)")
    for kind, name in ((BranchformerEncoder, "branchformer"), (EBranchformerEncoder, "e_branchformer")):
        if isinstance(encoder, kind):
            raise ValueError(f"streaming ONNX export of encoder {name} is not implemented (its cgMLP "
                             "convolution cache is not the conformer's shape that sherpa-onnx's layout holds)")


def metadata(model: nn.Module, streaming: bool, fbank: Optional[Dict[str, float]] = None) -> Dict[str, str]:
    """The metadata sherpa-onnx reads (``vocab_size`` and ``subsampling_factor`` offline;
    also ``head``, ``num_blocks``, ``output_size``, ``cnn_module_kernel`` and
    ``right_context`` streaming) plus ``model_type``, descriptive keys and the
    filterbank the model was trained on (:func:`fbank_metadata`: ``asrkit_sample_rate``,
    ``asrkit_num_mel_bins``, ``asrkit_frame_length_ms``, ``asrkit_frame_shift_ms``,
    ``asrkit_low_freq``, ``asrkit_high_freq``, ``asrkit_snip_edges``,
    ``asrkit_sample_scale``; Kaldi's povey window, no dither), which
    :mod:`asrkit.export.sherpa` compares with what the runtime computes."""
    encoder = model.encoder
    meta: Dict[str, str] = {
        "model_type": "wenet_ctc",
        "version": "1",
        "model_author": "asrkit",
        "comment": "streaming" if streaming else "offline",
        "vocab_size": str(int(model.vocab_size)),
        "subsampling_factor": str(int(encoder.subsampling_rate)),
    }
    meta.update(fbank_metadata(fbank or {}))
    if streaming:
        check_streaming_encoder(encoder)
        kernels = [layer.conv_module.depthwise_conv.kernel_size[0] for layer in encoder.encoders
                   if getattr(layer, "conv_module", None) is not None]
        meta.update({
            "head": str(int(encoder.attention_heads)),
            "num_blocks": str(len(encoder.encoders)),
            "output_size": str(int(encoder.output_size())),
            "cnn_module_kernel": str(int(kernels[0]) if kernels else 1),
            "right_context": str(int(encoder.embed.right_context)),
        })
    return meta


def write_tokens(units: Sequence[str], blank_id: int, path: Path) -> None:
    """``symbol id`` per line; the blank is written as ``<blank>`` when its symbol is
    not one sherpa-onnx recognises as the blank."""
    lines = []
    for i, unit in enumerate(units):
        if i == blank_id and unit not in BLANK_NAMES:
            unit = "<blank>"
        lines.append(f"{unit} {i}\n")
    atomic_write_text(path, "".join(lines))


def _example_streaming_inputs(model: nn.Module, num_mel_bins: int, chunk: int, left: int
                              ) -> Tuple[torch.Tensor, ...]:
    encoder = model.encoder
    required = chunk * left
    heads = int(encoder.attention_heads)
    d = int(encoder.output_size())
    meta = metadata(model, streaming=True)
    window = (chunk - 1) * encoder.subsampling_rate + encoder.embed.right_context + 1
    return (torch.randn(1, window, num_mel_bins) * 3 + 10,
            torch.tensor([required], dtype=torch.int64), torch.tensor([required], dtype=torch.int64),
            torch.zeros(len(encoder.encoders), heads, required, 2 * (d // heads)),
            torch.zeros(len(encoder.encoders), 1, d, int(meta["cnn_module_kernel"]) - 1),
            padded_mask(required, chunk, 0))


def padded_mask(required: int, chunk: int, chunks_done: int) -> torch.Tensor:
    """sherpa-onnx's ``attn_mask [1, 1, R + chunk]``: ``False`` on the cache rows not yet
    filled after ``chunks_done`` chunks."""
    mask = torch.ones(1, 1, required + chunk, dtype=torch.bool)
    mask[:, :, :max(required - chunks_done * chunk, 0)] = False
    return mask


def _save_with_metadata(src: Path, dst: Path, meta: Dict[str, str]) -> None:
    import onnx  # (deferred: optional dependency onnx)
    proto = onnx.load(str(src))
    del proto.metadata_props[:]
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    atomic_write_bytes(dst, proto.SerializeToString())


def _trace_to_onnx(graph: nn.Module, args: Tuple[torch.Tensor, ...], path: Path, input_names: List[str],
                   output_names: List[str], dynamic_axes: Dict[str, Dict[int, str]], meta: Dict[str, str]) -> None:
    raw = path.with_name(path.name + ".raw")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings: the input checks are fixed at trace time, as meant
        torch.onnx.export(graph, args, str(raw), dynamo=False, opset_version=OPSET, input_names=input_names,
                          output_names=output_names, dynamic_axes=dynamic_axes, do_constant_folding=True)
    try:
        _save_with_metadata(raw, path, meta)
    finally:
        raw.unlink(missing_ok=True)


def keep_checked(path: Path, meta: Dict[str, str], check: Optional[Callable[[Path], float]], int8: bool,
                 summary: Dict[str, object], tolerance: Optional[float] = None) -> None:
    """An exported file's last steps: ``check(path)`` (its largest difference from eager
    asrkit; None: not verified) -- the file deleted when the check raises or, with
    ``tolerance``, exceeds it (:class:`~asrkit.export.archive.ExportCheckError`) --, then its
    size and difference into ``summary["files"]`` / ``summary["max_abs_diff"]``, and with
    ``int8`` its int8 copy (:func:`quantize_int8`)."""
    if check is not None:
        try:
            diff = check(path)
            if tolerance is not None and diff > tolerance:
                raise ExportCheckError(f"{path.name}: differs from eager asrkit by {diff:.3g} (> {tolerance})")
            summary["max_abs_diff"][path.name] = diff
        except Exception:
            path.unlink(missing_ok=True)
            raise
    summary["files"][path.name] = path.stat().st_size
    if int8:
        quantize_int8(path, int8_name(path), meta)
        summary["files"][int8_name(path).name] = int8_name(path).stat().st_size


def quantize_int8(src: Path, dst: Path, meta: Dict[str, str]) -> None:
    """Dynamic int8 quantization of the MatMul weights (onnxruntime's
    ``quantize_dynamic``, as sherpa-onnx's own WeNet export does); metadata kept."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # (deferred: optional onnxruntime)
    raw = dst.with_name(dst.name + ".raw")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)  # its advice to pre-process, on the root logger
            quantize_dynamic(model_input=str(src), model_output=str(raw), op_types_to_quantize=["MatMul"],
                             weight_type=QuantType.QInt8)
        _save_with_metadata(raw, dst, meta)
    finally:
        logging.disable(logging.NOTSET)
        raw.unlink(missing_ok=True)


def ort_session(path: Path | str, num_threads: int = 1):
    """An onnxruntime CPU session with ``num_threads`` intra-op threads (sherpa-onnx's
    default for its recognizers is set by the caller, too)."""
    import onnxruntime as ort  # (deferred: optional dependency onnxruntime)
    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def session_runner(session) -> Callable[..., List]:
    """``run(*inputs)`` feeding numpy/torch inputs **by position**, as sherpa-onnx does."""
    names = [i.name for i in session.get_inputs()]

    def run(*inputs):
        feed = {n: (x.numpy() if isinstance(x, torch.Tensor) else x) for n, x in zip(names, inputs)}
        return session.run(None, feed)
    return run


def stream_log_probs(run: Callable[..., Sequence], feats: torch.Tensor, meta: Dict[str, str], chunk: int,
                     left: int) -> torch.Tensor:
    """CTC log-probs ``[1, chunks · chunk, V]`` of ``feats [T, F]`` (raw fbank) through a
    streaming model called as ``run(x, offset, required_cache_size, attn_cache,
    conv_cache, attn_mask) -> (log_probs, next_att_cache, next_conv_cache)``, exactly as
    sherpa-onnx's ``OnlineRecognizerCtcImpl`` drives it: a window of
    ``(chunk − 1)·rate + right_context + 1`` frames whenever more than that many unread
    frames are ready, advancing ``chunk · rate`` frames; ``offset`` starting at
    ``R = chunk · left`` and growing by the frames returned; zero caches; its mask.
    Frames after the last full window are not decoded (sherpa's callers pad the tail)."""
    if left < 1:
        raise ValueError(f"sherpa-onnx's streaming WeNet CTC needs num_left_chunks >= 1, got {left}")
    rate, context = int(meta["subsampling_factor"]), int(meta["right_context"])
    blocks, heads, d = int(meta["num_blocks"]), int(meta["head"]), int(meta["output_size"])
    required = chunk * left
    window, shift = (chunk - 1) * rate + context + 1, chunk * rate
    att = torch.zeros(blocks, heads, required, 2 * (d // heads))
    cnn = torch.zeros(blocks, 1, d, int(meta["cnn_module_kernel"]) - 1)
    offset = required
    outputs: List[torch.Tensor] = []
    processed = 0
    while processed + window < feats.size(0):
        x = feats[processed:processed + window].unsqueeze(0).contiguous()
        chunks_done = offset // chunk - left
        mask = padded_mask(required, chunk, chunks_done) if chunks_done < left else torch.ones(
            1, 1, required + chunk, dtype=torch.bool)
        log_probs, att, cnn = (torch.as_tensor(y) for y in run(
            x, torch.tensor([offset], dtype=torch.int64), torch.tensor([required], dtype=torch.int64),
            att, cnn, mask))
        outputs.append(log_probs)
        offset += log_probs.size(1)
        processed += shift
    if not outputs:
        return torch.zeros(1, 0, int(meta["vocab_size"]))
    return torch.cat(outputs, dim=1)


def eager_stream_reference(model: nn.Module, feats: torch.Tensor, normalize: Callable, chunk: int, left: int,
                           frames: int) -> torch.Tensor:
    """What a stream of ``frames`` encoder frames must give: the masked full forward of
    eager asrkit (chunk ``chunk``, ``left`` left chunks) over the input those frames read,
    through the CTC head."""
    rate, context = model.encoder.subsampling_rate, model.encoder.embed.right_context
    used = (frames // chunk - 1) * chunk * rate + (chunk - 1) * rate + context + 1
    x = normalize(feats[:used].unsqueeze(0))
    with torch.no_grad():
        out, _ = model.encoder(x, torch.tensor([used]), chunk, left)
        return model.ctc(out)


def padded_batch_difference(path: Path, graph: nn.Module, num_mel_bins: int, feature_mean: float) -> float:
    """The largest difference between an offline graph ``(x [N, T, F], x_lens) -> (out, out_lens)``
    run from ``path`` under onnxruntime and eager ``graph``, over one utterance and a padded
    batch of two (random features around ``feature_mean``), compared on each utterance's
    valid frames; :class:`~asrkit.export.archive.ExportCheckError` when the lengths differ."""
    run = session_runner(ort_session(path))
    worst = 0.0
    generator = torch.Generator().manual_seed(0)
    for lengths in ([131], [403, 250]):
        x = torch.randn(len(lengths), max(lengths), num_mel_bins, generator=generator) * 3 + feature_mean
        x_lens = torch.tensor(lengths, dtype=torch.int64)
        got, got_lens = run(x, x_lens)
        with torch.no_grad():
            want, want_lens = graph(x, x_lens)
        if got_lens.tolist() != want_lens.tolist():
            raise ExportCheckError(f"{path.name}: output lengths {got_lens.tolist()} != eager {want_lens.tolist()}")
        for b, n in enumerate(want_lens.tolist()):
            worst = max(worst, float((torch.as_tensor(got[b, :n]) - want[b, :n]).abs().max()))
    return worst


def _check_offline(path: Path, graph: OfflineCtcGraph, num_mel_bins: int, tolerance: float) -> float:
    worst = padded_batch_difference(path, graph, num_mel_bins, 10.0)  # (16-bit-scale log-mel values)
    if worst > tolerance:
        raise ExportCheckError(f"{path.name}: log-probs differ from eager asrkit by {worst:.3g} (> {tolerance})")
    return worst


def _check_streaming(path: Path, graph: StreamingCtcGraph, model: nn.Module, meta: Dict[str, str],
                     num_mel_bins: int, tolerance: float) -> float:
    run = session_runner(ort_session(path))
    feats = torch.randn(700, num_mel_bins, generator=torch.Generator().manual_seed(1)) * 3 + 10
    worst = 0.0
    for chunk, left in ((16, 4), (4, 2), (8, 1)):
        got = stream_log_probs(run, feats, meta, chunk, left)
        want = eager_stream_reference(model, feats, graph.normalizer, chunk, left, got.size(1))
        if got.shape != want.shape:
            raise ExportCheckError(f"{path.name}: chunk {chunk}: {tuple(got.shape)} frames, eager {tuple(want.shape)}")
        worst = max(worst, float((got - want).abs().max()))
    if worst > tolerance:
        raise ExportCheckError(f"{path.name}: streamed log-probs differ from eager asrkit's chunked forward by "
                               f"{worst:.3g} (> {tolerance})")
    return worst


def export_onnx(model: nn.Module, units: Sequence[str], output_dir: Path | str, *, num_mel_bins: int,
                sample_rate: int = 16000, frame_length: float = 25.0, frame_shift: float = 10.0,
                snip_edges: bool = True, high_freq: float = 0.0, sample_scale: float = 32768.0,
                feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None, streaming: bool = False,
                int8: bool = True, verify: bool = True, tolerance: float = CHECK_TOLERANCE) -> Dict[str, object]:
    """Write ``model.onnx`` (offline), with ``streaming`` also ``model-streaming.onnx``,
    each with ``*.int8.onnx`` when ``int8``, and ``tokens.txt`` into ``output_dir``.

    ``model``: an :class:`~asrkit.models.AsrModel` with a CTC head (else ``ValueError``);
    ``num_mel_bins``, ``sample_rate``, ``frame_length``/``frame_shift`` (ms),
    ``snip_edges``, ``high_freq``, ``sample_scale``: the training filterbank
    (``fbank_conf``), recorded in the metadata; ``summary["runtime_features"]`` is ``None``
    when sherpa-onnx computes exactly those features for the model, else the one-line
    reason it does not (:func:`asrkit.export.runtime_features.runtime_feature_mismatch`).  ``feature_cmvn``: a data-pipeline CMVN to put inside (the model's own CMVN layer is
    used as it is).  With ``verify`` each fp32 file is run under onnxruntime and compared
    with eager asrkit (offline: a padded batch; streaming: sherpa-onnx's protocol at
    chunks 16/4/8 with 4/2/1 left chunks against the masked forward), refusing
    (:class:`~asrkit.export.archive.ExportCheckError`) beyond ``tolerance``.  Files are
    written atomically.  Returns a summary (paths, sizes, check differences, seconds)."""
    if len(units) != model.vocab_size:
        raise ValueError(f"{len(units)} units, the model has {model.vocab_size} outputs")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = inference_copy(model)
    summary: Dict[str, object] = {"files": {}, "max_abs_diff": {}}
    started = time.perf_counter()
    fbank = {"sample_rate": sample_rate, "num_mel_bins": num_mel_bins, "frame_length_ms": frame_length,
             "frame_shift_ms": frame_shift, "snip_edges": bool(snip_edges), "high_freq": float(high_freq),
             "sample_scale": float(sample_scale)}
    summary["runtime_features"] = runtime_feature_mismatch(dict(FBANK_DEFAULTS, **fbank), "wenet_ctc")
    offline = OfflineCtcGraph(model, feature_cmvn).eval()
    jobs = [(offline, out / OFFLINE_FILE, metadata(model, False, fbank))]
    if streaming:
        jobs.append((StreamingCtcGraph(model, feature_cmvn).eval(), out / STREAMING_FILE,
                     metadata(model, True, fbank)))
    for graph, path, meta in jobs:
        if isinstance(graph, StreamingCtcGraph):
            _trace_to_onnx(graph, _example_streaming_inputs(model, num_mel_bins, 16, 4), path,
                           ["x", "offset", "required_cache_size", "attn_cache", "conv_cache", "attn_mask"],
                           ["log_probs", "next_att_cache", "next_conv_cache"],
                           {"x": {1: "T"}, "attn_cache": {2: "R"}, "attn_mask": {2: "R_plus_chunk"},
                            "log_probs": {1: "chunk"}, "next_att_cache": {2: "R"}}, meta)
            check = (lambda p, g=graph, m=meta: _check_streaming(p, g, model, m, num_mel_bins, tolerance))
        else:
            example = (torch.randn(1, 200, num_mel_bins) * 3 + 10, torch.tensor([200], dtype=torch.int64))
            _trace_to_onnx(graph, example, path, ["x", "x_lens"], ["log_probs", "log_probs_lens"],
                           {"x": {0: "N", 1: "T"}, "x_lens": {0: "N"}, "log_probs": {0: "N", 1: "T_out"},
                            "log_probs_lens": {0: "N"}}, meta)
            check = (lambda p, g=graph: _check_offline(p, g, num_mel_bins, tolerance))
        keep_checked(path, meta, check if verify else None, int8, summary)
    write_tokens(units, int(model.blank_id), out / TOKENS_FILE)
    summary["seconds"] = time.perf_counter() - started
    return summary
