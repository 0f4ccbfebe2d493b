"""The two kinds of model :func:`asrkit.load_model` takes, behind one interface
(:class:`Backend`): features in, encoder output and a searcher out.

* an **experiment directory** (:class:`EagerBackend`): ``train.yaml`` and a checkpoint,
  loaded as every tool loads them (:func:`asrkit.trained_model.load_trained_model`);
  features go through the config's data-pipeline CMVN (``dataset_conf.cmvn_file``) when set;
* an **exported archive** ``final.zip`` (:class:`ScriptBackend`): the TorchScript module of
  ``asrkit.bin.export`` (:func:`asrkit.export.load_exported`), which takes raw fbank.

Both then decode with the same code: the searcher's methods, through the mode registry.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import torch
import yaml

from asrkit.data.features import FBANK_OPTION_DEFAULTS, apply_cmvn
from asrkit.decode.batch import encoder_output
from asrkit.decode.ctc_search import apply_blank_penalty
from asrkit.decode.modes import ModeError, check_modes
from asrkit.decode.options import DecodingOptionError, DecodingOptions
from asrkit.decode.searcher import Searcher
from asrkit.checkpoint.names import checkpoint_to_decode
from asrkit.export.archive import EXTRA_CONFIG, EXTRA_META, load_exported
from asrkit.models.chunks import ChunkTraining
from asrkit.trained_model import TrainedModel, load_trained_model
from asrkit.transcribe.front_end import KaldiFbank, WhisperLogMel, front_end_of


class ModelLoadError(ValueError):
    """The model source is missing or not usable (one line naming it)."""


class Backend:
    """What transcription needs of a model.  Attributes: ``front_end`` (the features it was
    trained on, :mod:`asrkit.transcribe.front_end`), ``sample_rate`` and ``frame_shift`` (ms)
    (the front end's), ``subsampling``, ``right_context`` (input frames
    an encoder frame sees beyond its first), ``min_input_length``, ``units`` (symbols by
    id), ``blank``, ``has_ctc``, ``searcher`` (a :class:`Searcher` or its scripted copy),
    ``bidirectional``, ``chunk_trained`` (trained with dynamic or static chunks),
    ``description``, ``decoding_source`` (what the transducer modes search with: the model,
    or the archive's module; :func:`asrkit.decode.shared.transducer_parts`)."""

    front_end: KaldiFbank | WhisperLogMel

    @property
    def sample_rate(self) -> int:
        return int(self.front_end.sample_rate)

    @property
    def frame_shift(self) -> float:
        return float(self.front_end.frame_shift)

    def fbank_options(self) -> dict:
        """The keyword arguments of :class:`asrkit.stream.features.StreamingFbank` after the
        sample rate; :class:`DecodingOptionError` for a model of other features (Whisper's
        log-mel is computed over a whole segment, it does not stream)."""
        if not isinstance(self.front_end, KaldiFbank):
            raise DecodingOptionError(f"{self.description}: a model of Whisper's log-mel features does not "
                                      f"stream (they are normalised over the whole segment)")
        return self.front_end.stream_options()

    def normalise(self, feats: torch.Tensor) -> torch.Tensor:
        """``feats [T, F]`` (the front end's) as :meth:`encode` takes them."""
        return feats

    def encode(self, feats: torch.Tensor, lengths: torch.Tensor,
               options: DecodingOptions) -> tuple[torch.Tensor, torch.Tensor]:
        """``(encoder_out [B, T', D], encoder_lengths [B])`` of normalised ``feats``, with
        the encoder context of ``options`` (its chunk options)."""
        raise NotImplementedError

    def check_mode(self, mode: str) -> None:
        raise NotImplementedError

    def text(self, ids: Sequence[int]) -> str:
        raise NotImplementedError


class EagerBackend(Backend):
    """A :class:`~asrkit.trained_model.TrainedModel` (``trained``) as transcription runs it."""

    def __init__(self, trained: TrainedModel, description: str):
        cfg, model, tokenizer = trained.cfg, trained.model, trained.tokenizer
        self.trained = trained
        self.model, self.tokenizer, self.description = model, tokenizer, description
        self.decoding_source = model
        self.front_end = front_end_of(cfg.dataset_conf)
        self.feature_cmvn = trained.feature_cmvn
        self.subsampling = int(model.encoder.subsampling_rate)
        self.min_input_length = int(model.encoder.min_input_length)
        self.right_context = self.min_input_length - 1
        self.units = list(tokenizer.symbols)
        self.blank = int(model.blank_id)
        self.searcher = Searcher.of_model(model)
        self.has_ctc = model.ctc is not None
        self.bidirectional = self.searcher.bidirectional
        self.space_separated = bool(getattr(tokenizer, "split_with_space", False))
        self.chunk_trained = ChunkTraining.from_config(cfg).chunked

    def normalise(self, feats: torch.Tensor) -> torch.Tensor:
        return feats if self.feature_cmvn is None else apply_cmvn(feats, *self.feature_cmvn)

    def encode(self, feats, lengths, options):
        return encoder_output(self.model, feats, lengths, options)

    def check_mode(self, mode: str) -> None:
        check_modes(self.model, [mode])

    def text(self, ids) -> str:
        return self.tokenizer.decode(ids)


class ArchiveSearcher:
    """An archive's scripted :class:`Searcher` as :class:`asrkit.decode.shared.SharedOutputs`
    calls it, also for archives exported before ``blank_penalty`` and ``length_penalty``
    were arguments of its methods: the penalty is applied here with the function the
    scripted code runs (:func:`asrkit.decode.ctc_search.apply_blank_penalty`), and a
    ``length_penalty`` the archive cannot take is refused."""

    def __init__(self, scripted):
        self.scripted = scripted
        self.blank = int(scripted.blank)
        self.takes_length_penalty = "length_penalty" in str(scripted.attention_beam.schema)

    def __getattr__(self, name: str):
        return getattr(self.scripted, name)

    def ctc_log_probs(self, encoder_out: torch.Tensor, blank_penalty: float = 0.0) -> torch.Tensor:
        return apply_blank_penalty(self.scripted.ctc_log_probs(encoder_out), self.blank, blank_penalty)

    def attention_beam(self, encoder_out, encoder_lengths, beam_size: int, length_penalty: float = 0.0):
        if self.takes_length_penalty:
            return self.scripted.attention_beam(encoder_out, encoder_lengths, beam_size, length_penalty)
        if length_penalty != 0.0:
            raise DecodingOptionError("this archive was exported before length_penalty existed; "
                                      "export it again to use it")
        return self.scripted.attention_beam(encoder_out, encoder_lengths, beam_size)


def _archive_chunk_trained(config_text: str) -> bool:
    """Whether the ``train.yaml`` an archive carries trained with chunks (``encoder_conf``
    ``use_dynamic_chunk`` or ``static_chunk_size > 0``); ``False`` when it says nothing."""
    try:
        conf = (yaml.safe_load(config_text) or {}).get("encoder_conf") or {}
    except (yaml.YAMLError, AttributeError):
        return False
    return ChunkTraining(bool(conf.get("use_dynamic_chunk", False)),
                         static_chunk_size=int(conf.get("static_chunk_size", 0) or 0)).chunked


def archive_fbank_options(meta_text: str) -> tuple[bool, float, float]:
    """``(snip_edges, high_freq, sample_scale)`` an archive's ``meta.json`` records; WeNet's
    fbank (today's defaults) for archives exported before it recorded them."""
    try:
        meta = json.loads(meta_text) if meta_text else {}
    except json.JSONDecodeError:
        meta = {}
    d = FBANK_OPTION_DEFAULTS
    return (bool(meta.get("snip_edges", d["snip_edges"])), float(meta.get("high_freq", d["high_freq"])),
            float(meta.get("sample_scale", d["sample_scale"])))


class ScriptBackend(Backend):
    def __init__(self, module, extra: dict, description: str):
        self.module, self.description = module, description
        self.front_end = KaldiFbank(int(module.sample_rate()), int(module.num_mel_bins()),
                                    float(module.frame_length()), float(module.frame_shift()),
                                    *archive_fbank_options(extra.get(EXTRA_META, "")))
        self.subsampling = int(module.subsampling_rate())
        self.min_input_length = int(module.min_input_length())
        self.right_context = int(module.right_context())
        self.units = list(module.units())
        self.blank = int(module.blank_id())
        self.searcher = ArchiveSearcher(module.searcher)
        self.decoding_source = module
        self.has_ctc = bool(module.has_ctc())
        self.bidirectional = bool(module.is_bidirectional_decoder())
        self.separator = str(module.unit_separator())
        self.space_separated = self.separator == " "
        self.modes = list(module.supported_modes())
        self.chunks = "chunk_size" in str(module.encoder.forward.schema)  # (older archives: full context only)
        self.chunk_trained = self.chunks and _archive_chunk_trained(extra.get(EXTRA_CONFIG, ""))

    def encode(self, feats, lengths, options):
        if not options.chunked:
            return self.module(feats, lengths)
        if not self.chunks:
            raise DecodingOptionError(f"{self.description}: this archive's encoder takes no chunk size "
                                      f"(exported before chunked decoding); decode with full context")
        module = self.module  # the module's own forward with the encoder's chunk arguments
        if hasattr(module, "normalizer"):
            feats = module.normalizer(feats)
        else:  # (archives exported before RawFbankNormalization held the two CMVNs themselves)
            for cmvn in (module.feature_cmvn, module.cmvn):
                feats = feats if cmvn is None else cmvn(feats)
        return module.encoder(feats, lengths, options.decoding_chunk_size, options.num_decoding_left_chunks)

    def check_mode(self, mode: str) -> None:
        if mode not in self.modes:
            raise ModeError(f"mode {mode!r}: this archive runs {', '.join(self.modes)}")

    def text(self, ids) -> str:
        """The archive's rule (``unit_separator()``): units joined by the separator; with
        ``""`` the ``▁`` become spaces and the ends are stripped."""
        units = [self.units[i] for i in ids]
        if self.separator:
            return self.separator.join(units)
        return "".join(units).replace("\u2581", " ").strip()


# ----------------------------------------------------------------------------- experiments


def find_checkpoint(exp_dir: Path) -> Path:
    """The checkpoint an experiment decodes with when none is named
    (:func:`asrkit.checkpoint.names.checkpoint_to_decode`: the ``avg_<N>.pt`` with the
    largest N, else ``final.pt``, else the newest training checkpoint by recorded step)."""
    chosen = checkpoint_to_decode(exp_dir)
    if chosen is None:
        raise ModelLoadError(f"{exp_dir}: no checkpoint (avg_<N>.pt, final.pt, epoch_*.pt or step_*.pt); "
                             f"name one with checkpoint=")
    return chosen


def load_experiment(exp_dir: Path, checkpoint: Optional[str | Path], device: str,
                    overrides: Sequence[str]) -> EagerBackend:
    config = exp_dir / "train.yaml"
    if not config.is_file():
        raise ModelLoadError(f"{exp_dir}: no train.yaml (an experiment directory holds the training config)")
    if checkpoint is None:
        path = find_checkpoint(exp_dir)
    else:
        path = Path(checkpoint)
        if not path.is_absolute() and not path.exists() and (exp_dir / path).exists():
            path = exp_dir / path
        if not path.is_file():
            raise ModelLoadError(f"checkpoint not found: {checkpoint}")
    trained = load_trained_model(config, path, overrides=overrides, device=device)
    return EagerBackend(trained, f"{exp_dir} ({path.name})")


def load_archive(path: Path, device: str) -> ScriptBackend:
    try:
        module, extra = load_exported(path)
    except (RuntimeError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0].split(". ")[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"{path}: not an exported asrkit archive ({first})") from None
    return ScriptBackend(module.to(device), extra, str(path))
