"""Building, checking, saving and loading the TorchScript archive of a trained model
(the module itself is :class:`asrkit.export.torchscript.ScriptableAsr`).

Use :func:`export_model` to build, script, check and save in one call.
"""
from __future__ import annotations

import copy
import io
import json
import time
import warnings
from pathlib import Path
from typing import List, Optional, Tuple

import torch
from torch import nn

from asrkit.decode.batch import decode
from asrkit.decode.options import DEFAULTS, DecodingOptions
from asrkit.export.torchscript import ScriptableAsr
from asrkit.files import atomic_write_bytes
from asrkit.models.mask import valid_mask

EXPORT_FORMAT = 1
# Extra files stored in the archive (read with torch.jit.load(path, _extra_files={...})).
EXTRA_CONFIG = "train.yaml"
EXTRA_UNITS = "units.txt"
EXTRA_META = "meta.json"


class ExportCheckError(RuntimeError):
    """The exported module disagrees with the eager model."""


# ----------------------------------------------------------------------------- export


def _is_dropout(module: nn.Module) -> bool:
    """A dropout layer: named ``*Dropout``, holding no parameters, buffers or submodules."""
    return (type(module).__name__.endswith("Dropout") and not list(module.parameters())
            and not list(module.buffers()) and not list(module.children()))


def inference_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` in eval mode with every dropout layer replaced by
    ``nn.Identity`` -- what dropout is at inference -- so a dropout whose training path
    TorchScript cannot compile never blocks the export (``check_against_eager`` then
    compares the copy with the original)."""
    copy_ = copy.deepcopy(model).eval()
    for module in list(copy_.modules()):
        for name, child in list(module.named_children()):
            if _is_dropout(child):
                setattr(module, name, nn.Identity())
    return copy_


def script_model(model: nn.Module, units: List[str], **meta) -> torch.jit.ScriptModule:
    """``torch.jit.script`` of :class:`ScriptableAsr` around an inference copy of
    ``model`` (see :func:`inference_copy`; ``model`` itself is left as it is).
    ``meta``: the keyword arguments of :class:`ScriptableAsr`."""
    wrapper = ScriptableAsr(inference_copy(model), units, **meta).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script deprecation notice
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(wrapper)


def load_exported(source) -> tuple[torch.jit.ScriptModule, dict[str, str]]:
    """``(module, extra files)`` of an exported archive (a path or a binary file object),
    loaded on the CPU; the module is in eval mode."""
    extra = {EXTRA_CONFIG: "", EXTRA_UNITS: "", EXTRA_META: ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(source if hasattr(source, "read") else str(source), map_location="cpu",
                                _extra_files=extra)
    return module.eval(), {k: (v.decode("utf-8") if isinstance(v, bytes) else v) for k, v in extra.items()}


def check_against_eager(model: nn.Module, scripted, feats: torch.Tensor, feats_lengths: torch.Tensor,
                        beam_size: int = DEFAULTS["beam_size"], ctc_weight: float = DEFAULTS["ctc_weight"],
                        reverse_weight: float = DEFAULTS["reverse_weight"],
                        blank_skip_threshold: float = DEFAULTS["blank_skip_threshold"],
                        feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                        atol: float = 1e-5) -> dict:
    """Compare ``scripted`` with eager :func:`asrkit.decode.decode` on one batch: encoder
    outputs within ``atol`` and identical hypotheses in every mode of the module's
    ``decode`` (its ``default_modes()``).  Raises :class:`ExportCheckError` naming the
    first difference; returns ``{"max_abs_diff": ..., "modes": [...]}``.
    ``feature_cmvn``: the data-pipeline CMVN eager decoding applies to ``feats`` first."""
    modes = list(scripted.default_modes())
    eager_feats = feats if feature_cmvn is None else (feats - feature_cmvn[0]) * feature_cmvn[1]
    options = DecodingOptions(modes=modes, beam_size=beam_size, ctc_weight=ctc_weight,
                              reverse_weight=reverse_weight, blank_skip_threshold=blank_skip_threshold)
    with torch.inference_mode():
        enc, enc_lengths = model.encode(eager_feats, feats_lengths)
        expected = decode(model, eager_feats, feats_lengths, options)
        s_enc, s_lengths = scripted(feats, feats_lengths)
        got = scripted.decode(feats, feats_lengths, beam_size=beam_size, ctc_weight=ctc_weight,
                              reverse_weight=reverse_weight, blank_skip_threshold=blank_skip_threshold)
    if not torch.equal(s_lengths, enc_lengths):
        raise ExportCheckError(f"encoder lengths differ: {s_lengths.tolist()} vs eager {enc_lengths.tolist()}")
    valid = valid_mask(enc_lengths, enc.size(1)).unsqueeze(-1)
    diff = float(((s_enc - enc).abs() * valid).max()) if enc.numel() else 0.0
    if diff > atol:
        raise ExportCheckError(f"encoder outputs differ by {diff:.3g} > {atol:g}")
    for mode in modes:
        if got[mode] != expected[mode]:
            raise ExportCheckError(f"{mode}: exported {got[mode]} != eager {expected[mode]}")
    return {"max_abs_diff": diff, "modes": modes}


def export_model(model: nn.Module, units: List[str], output: str | Path, *, sample_rate: int,
                 num_mel_bins: int, frame_length: float, frame_shift: float,
                 feature_cmvn: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                 unit_separator: str = "", config_text: str = "", verify: bool = True,
                 seed: int = 0, input_digests: Optional[dict] = None, snip_edges: bool = True,
                 high_freq: float = 0.0, sample_scale: float = 32768.0) -> dict:
    """Script ``model`` with its metadata and write it to ``output`` with ``train.yaml``
    (``config_text``), ``units.txt`` and ``meta.json`` as extra files; ``input_digests``
    (the SHA-256 of the units file and BPE model the model was trained with,
    ``asrkit.config_files.input_digests``) goes into ``meta.json`` under ``input_digests``, and
    the filterbank options beyond the module's own (``snip_edges``, ``high_freq``,
    ``sample_scale`` of ``fbank_conf``) under their names.

    The archive is serialised in memory, loaded back from those bytes and (``verify``)
    checked against eager decoding on a random batch of two utterances of different
    lengths (:func:`check_against_eager`) before it is written atomically, so a failed
    check never leaves a file at ``output``.  Returns a summary dict (timings in
    seconds, size in bytes, check results)."""
    t0 = time.perf_counter()
    scripted = script_model(model, units, sample_rate=sample_rate, num_mel_bins=num_mel_bins,
                            frame_length=frame_length, frame_shift=frame_shift,
                            feature_cmvn=feature_cmvn, unit_separator=unit_separator)
    summary: dict = {"script_s": time.perf_counter() - t0}
    info = {"format": EXPORT_FORMAT, "sample_rate": sample_rate, "num_mel_bins": num_mel_bins,
            "frame_length": frame_length, "frame_shift": frame_shift, "dither": 0.0, "energy_floor": 0.0,
            "snip_edges": bool(snip_edges), "high_freq": float(high_freq), "sample_scale": float(sample_scale),
            "vocab_size": len(units), "sos": scripted.sos_symbol(), "eos": scripted.eos_symbol(),
            "blank": scripted.blank_id(), "subsampling_rate": scripted.subsampling_rate(),
            "right_context": scripted.right_context(), "min_input_length": scripted.min_input_length(),
            "is_bidirectional_decoder": scripted.is_bidirectional_decoder(),
            "has_decoder": scripted.has_decoder(), "has_ctc": scripted.has_ctc(),
            "modes": scripted.supported_modes(), "unit_separator": unit_separator,
            "feature_cmvn_included": feature_cmvn is not None}
    if input_digests:
        info["input_digests"] = dict(input_digests)
    extra = {EXTRA_CONFIG: config_text, EXTRA_UNITS: "".join(f"{u} {i}\n" for i, u in enumerate(units)),
             EXTRA_META: json.dumps(info, indent=1, sort_keys=True, ensure_ascii=False)}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(scripted, buffer, _extra_files=extra)
    data = buffer.getvalue()
    summary["bytes"] = len(data)
    if verify:
        t1 = time.perf_counter()
        loaded, _ = load_exported(io.BytesIO(data))
        g = torch.Generator().manual_seed(seed)
        min_frames = scripted.min_input_length()
        lengths = torch.tensor([min_frames + 120, min_frames + 57])
        feats = torch.randn(2, int(lengths.max()), num_mel_bins, generator=g) * 3.0 + 8.0
        feats[1, int(lengths[1]):] = 0.0
        summary.update(check_against_eager(model, loaded, feats, lengths, beam_size=4,
                                           feature_cmvn=feature_cmvn))
        summary["verify_s"] = time.perf_counter() - t1
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(output, data)
    summary["total_s"] = time.perf_counter() - t0
    return summary
