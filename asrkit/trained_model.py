"""A trained model as every tool loads it: the experiment's config, its tokenizer, the model
with its checkpoint's weights, and the data pipeline's feature CMVN -- the one loader that
recognition, export, transcription, serving and the scripts share (:func:`load_trained_model`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional, Sequence

from asrkit.checkpoint.load import load_checkpoint
from asrkit.checkpoint.weights import load_weights
from asrkit.config_files import (INPUT_DIGESTS, CmvnStats, check_input_digests, check_units_size,
                                 load_experiment_config, load_model_inputs)
from asrkit.models import AsrModel, build_model
from asrkit.text.tokenizer import Tokenizer


@dataclasses.dataclass(frozen=True)
class TrainedModel:
    """``cfg``: the experiment's resolved config (``TrainConfig``); ``tokenizer``: its units
    (and BPE model); ``model``: in eval mode on the device it was loaded to;
    ``feature_cmvn``: ``(mean, istd)`` of the data pipeline's CMVN (``dataset_conf.cmvn_file``,
    which an exported model applies itself), or ``None``; ``checkpoint``: the weights' file."""

    cfg: object
    tokenizer: Tokenizer
    model: AsrModel
    feature_cmvn: Optional[CmvnStats]
    checkpoint: Path


def feature_dim(cfg) -> int:
    """The model's input dimension: ``input_dim``, else ``dataset_conf.feat_dim`` (the selected features' bins)."""
    return cfg.input_dim if cfg.input_dim is not None else cfg.dataset_conf.feat_dim


def build_trained_model(cfg, checkpoint: str | Path, vocabulary, device: str = "cpu") -> AsrModel:
    """The model of ``cfg`` (built as :func:`asrkit.models.build_model` builds it, on
    :func:`feature_dim` inputs) with the weights of ``checkpoint`` (a training checkpoint
    holding ``"model"``, a bare state_dict, or a WeNet checkpoint:
    :func:`asrkit.checkpoint.weights.load_weights`), in eval mode on ``device``.  CMVN
    statistics come from the checkpoint.

    The units of ``vocabulary`` are checked against the model before its weights load
    (:func:`asrkit.config_files.check_units_size`: their number against ``output_dim``;
    :func:`asrkit.config_files.check_input_digests`: the units file and BPE model against the
    digests the checkpoint recorded), raising
    :class:`asrkit.text.units.UnitsError` / :class:`asrkit.text.tokenizer.BpeModelError`.
    :func:`load_trained_model` is the whole loader; this step alone serves a caller whose
    units are not a file (a benchmark's random vocabulary)."""
    check_units_size(cfg, vocabulary.size)
    model = build_model(cfg, feature_dim(cfg), vocabulary, load_cmvn_stats=False)
    state = load_checkpoint(checkpoint)
    check_input_digests(cfg, state.get(INPUT_DIGESTS), checkpoint)
    load_weights(model, state, f"checkpoint {checkpoint}")
    return model.to(device).eval()


@dataclasses.dataclass(frozen=True)
class Experiment:
    """An experiment's config (``cfg``, its relative file paths resolved), its tokenizer and
    the data pipeline's feature CMVN (``(mean, istd)`` of ``dataset_conf.cmvn_file``, or
    None), read and checked -- what a tool checks its other inputs against before the model
    is built (:meth:`load_model`), so that bad input is refused before a checkpoint is read."""

    cfg: object
    tokenizer: Tokenizer
    feature_cmvn: Optional[CmvnStats] = None

    def load_model(self, checkpoint: str | Path, device: str = "cpu") -> TrainedModel:
        """This experiment's model with the weights of ``checkpoint`` (:func:`build_trained_model`)
        and the data pipeline's feature CMVN."""
        model = build_trained_model(self.cfg, checkpoint, self.tokenizer.vocabulary, device)
        return TrainedModel(self.cfg, self.tokenizer, model, self.feature_cmvn, Path(checkpoint))


def open_experiment(config: str | Path, overrides: Sequence[str] = ()) -> Experiment:
    """The :class:`Experiment` of ``config`` (its ``train.yaml``, with ``overrides``
    ``KEY.PATH=VALUE``; relative file paths found from any working directory:
    :func:`asrkit.config_files.load_experiment_config`), its tokenizer's and feature CMVN's
    files read and checked once (:func:`asrkit.config_files.load_model_inputs`).  Raises the
    loaders' one-line errors (``ConfigError``, ``UnitsError``, ``BpeModelError``, ``CmvnError``)."""
    cfg = load_experiment_config(config, overrides)
    inputs = load_model_inputs(cfg, model_cmvn=False)
    return Experiment(cfg, inputs.tokenizer, inputs.data_cmvn)


def load_trained_model(config: str | Path, checkpoint: str | Path, *, overrides: Sequence[str] = (),
                       device: str = "cpu") -> TrainedModel:
    """:func:`open_experiment` then :meth:`Experiment.load_model`: the model of ``config``
    with the weights of ``checkpoint``, on ``device``.  Raises the loaders' one-line errors
    (``ConfigError``, ``UnitsError``, ``BpeModelError``, ``CheckpointError``, ``CmvnError``)."""
    return open_experiment(config, overrides).load_model(checkpoint, device)
