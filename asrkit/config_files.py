"""The files a config names besides its data -- units, BPE model, non-linguistic symbols,
CMVN statistics -- read and checked once, before a model is built, and what counts as bad
input: a file the user handed in that is missing or malformed.

:func:`load_model_inputs` returns them loaded (:class:`ModelInputs`), so a training run
builds its tokenizer, sample processors and model from what was checked instead of reading
the files again.  Every tool reports :data:`BAD_INPUT` in one line and exits with status 2
(``asrkit.bin.bad_input.run_tool``; ``asrkit.train.run``).

A checkpoint records the SHA-256 of the units file (and of the BPE model) it was trained
with (:data:`INPUT_DIGESTS`, written by the trainer and carried by ``average_model`` and
exported archives); :func:`check_units_size` and :func:`check_input_digests` refuse units
that do not fit a checkpoint's model before it is built.

An experiment's ``train.yaml`` names these files by paths relative to where it was trained;
:func:`load_experiment_config` (recognize, ``asrkit transcribe``) finds them from any
working directory (:func:`resolve_config_paths`)."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Optional, Sequence

import torch

from asrkit.config import load_config

from asrkit.schema import ConfigError
from asrkit.data.features import CmvnError, feature_record, load_cmvn
from asrkit.data.lists import ListError
from asrkit.checkpoint.load import CheckpointError
from asrkit.files import file_digest
from asrkit.models.registry import check_cmvn_placement, model_cmvn_stats
from asrkit.text.tokenizer import BpeModelError, Tokenizer, build_tokenizer
from asrkit.text.units import UnitsError
from asrkit.text.wenet import NonLangSymsError

BAD_INPUT = (ConfigError, CheckpointError, ListError, UnitsError, BpeModelError, NonLangSymsError, CmvnError,
             FileNotFoundError)

CmvnStats = tuple[torch.Tensor, torch.Tensor]  # (mean, istd), float32 [F]


@dataclasses.dataclass(frozen=True)
class ModelInputs:
    """The loaded inputs of a config: its ``tokenizer``; ``data_cmvn``, the statistics of
    ``dataset_conf.cmvn_file`` (None when unset); ``model_cmvn``, those of the model layer's
    ``cmvn_conf.cmvn_file`` (None when the model has no CMVN layer, or when they were not
    asked for: decoding and export take them from the checkpoint)."""

    tokenizer: Tokenizer
    data_cmvn: Optional[CmvnStats] = None
    model_cmvn: Optional[CmvnStats] = None


def load_model_inputs(cfg, *, model_cmvn: bool) -> ModelInputs:
    """Read and check every units/BPE/CMVN file of ``cfg`` (a ``TrainConfig``): the units
    file and its ``special_tokens`` declaration (:class:`UnitsError`), the sentencepiece
    model (:class:`BpeModelError`), the non-linguistic symbols (:class:`NonLangSymsError`),
    ``ctc_conf.ctc_blank_id`` against the units' ``<blank>`` (when the model has a CTC head)
    and the CMVN files (:class:`CmvnError`, their dimension against
    ``dataset_conf.feat_dim``): ``dataset_conf.cmvn_file`` always, ``cmvn_conf.cmvn_file``
    of the model layer only with ``model_cmvn`` (training); both against the features they
    record (:func:`asrkit.data.features.load_cmvn`)."""
    if model_cmvn:
        check_cmvn_placement(cfg)
    tokenizer = build_tokenizer(cfg)
    blank = tokenizer.vocabulary.blank_id
    if cfg.model_conf.ctc_weight > 0.0 and cfg.ctc_conf.ctc_blank_id != blank:
        where = (f"{cfg.tokenizer_conf.symbol_table_path} has <blank>" if cfg.tokenizer != "whisper"
                 else "Whisper's CTC blank <|nospeech|> is")
        raise UnitsError(f"ctc_conf.ctc_blank_id is {cfg.ctc_conf.ctc_blank_id} but {where} at id {blank}: "
                         f"set ctc_conf.ctc_blank_id: {blank}")
    dim = cfg.dataset_conf.feat_dim
    features = feature_record(cfg.dataset_conf)
    data_stats = load_cmvn(cfg.dataset_conf.cmvn_file, dim, features) if cfg.dataset_conf.cmvn_file else None
    model_stats = model_cmvn_stats(cfg, dim, features) if model_cmvn else None
    return ModelInputs(tokenizer, data_stats, model_stats)


def load_text_inputs(cfg, *, model_cmvn: bool) -> Tokenizer:
    """The tokenizer of ``cfg``, after :func:`load_model_inputs` checked every file."""
    return load_model_inputs(cfg, model_cmvn=model_cmvn).tokenizer


# The checkpoint entry (and exported archive meta.json key) recording what a model was trained
# with: {"units": SHA-256 of the units file's bytes, "bpe_model": that of the sentencepiece
# model (BPE tokenizers only)}, hex.
INPUT_DIGESTS = "input_digests"


def _text_files(cfg) -> dict[str, str]:
    """``{"units": path, "bpe_model": path}`` of ``cfg`` (each when set; the BPE model for
    ``tokenizer: bpe`` only)."""
    conf = cfg.tokenizer_conf
    files = {"units": conf.symbol_table_path} if conf.symbol_table_path else {}
    if cfg.tokenizer == "bpe" and conf.bpe_path:
        files["bpe_model"] = conf.bpe_path
    return files


def input_digests(cfg) -> dict[str, str]:
    """The :data:`INPUT_DIGESTS` entry of ``cfg``'s files: the SHA-256 (hex) of the bytes
    of ``tokenizer_conf.symbol_table_path`` under ``units`` and, for ``tokenizer: bpe``, of
    ``tokenizer_conf.bpe_path`` under ``bpe_model``.  A file that cannot be read is left out
    (nothing is then checked for it)."""
    digests = {}
    for kind, path in _text_files(cfg).items():
        try:
            digests[kind] = file_digest(path)
        except OSError:
            continue
    return digests


def check_units_size(cfg, vocabulary_size: int) -> None:
    """Raise :class:`UnitsError` naming the units file when its ``vocabulary_size`` units
    differ from the config's ``output_dim`` (the model's output size; nothing to check
    when unset)."""
    if cfg.output_dim is not None and cfg.output_dim != vocabulary_size:
        raise UnitsError(f"units file {cfg.tokenizer_conf.symbol_table_path} has {vocabulary_size} units but the "
                         f"model has {cfg.output_dim} outputs (output_dim of the config): pass the units file "
                         f"the model was trained with")


def check_input_digests(cfg, recorded: Optional[dict], checkpoint: str | Path) -> None:
    """Raise :class:`UnitsError` / :class:`BpeModelError` naming the file when the units
    file or BPE model of ``cfg`` differs from the SHA-256 ``recorded`` (a checkpoint's
    :data:`INPUT_DIGESTS` entry): the model of ``checkpoint`` was trained with other units
    and would decode them into the wrong text without a word.  ``recorded`` None (a WeNet
    checkpoint, or an asrkit one saved before the digests were recorded) or without a
    file's entry: nothing to check for it."""
    got = input_digests(cfg)
    for kind, path in _text_files(cfg).items():
        want = (recorded or {}).get(kind)
        if want and kind in got and got[kind] != want:
            error = UnitsError if kind == "units" else BpeModelError
            what = "units file" if kind == "units" else "BPE model"
            raise error(f"{what} {path} differs from the one checkpoint {checkpoint} was trained with (SHA-256 "
                        f"{got[kind][:12]}..., recorded {want[:12]}...): the model was trained with other units; "
                        f"pass the {what} it was trained with")


# ----------------------------------------------------------------------------- an experiment's paths

# The config keys naming files a decoding tool reads (or may), with the error a missing one
# raises and what to call it -- the loaders' own (asrkit.text, asrkit.data.features).
CONFIG_PATH_KEYS = {"tokenizer_conf.symbol_table_path": (UnitsError, "units file"),
                    "tokenizer_conf.bpe_path": (BpeModelError, "BPE model"),
                    "tokenizer_conf.non_lang_syms_path": (NonLangSymsError, "non-linguistic symbols file"),
                    "dataset_conf.cmvn_file": (CmvnError, "CMVN file"),
                    "cmvn_conf.cmvn_file": (CmvnError, "CMVN file")}


def _get(cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part, None)
        if node is None:
            return None
    return node


def resolve_config_paths(cfg, config: str | Path) -> list[str]:
    """Overrides making the relative file paths of ``cfg`` (:data:`CONFIG_PATH_KEYS`;
    ``cfg`` loaded from the experiment's ``config``, its ``train.yaml``) absolute.  Each is
    looked up relative to, in order, the recipe directory (the experiment directory's
    parent's parent: ``exp/<name>/`` of the recipe whose ``run.sh`` decodes from there), the
    experiment directory (the config's folder: a WeNet experiment, whose paths are relative
    to where it was trained) and the working directory; the first that exists wins.

    A file that decoding reads (:func:`load_model_inputs` with ``model_cmvn=False``) and that
    is found nowhere raises its loader's error (:class:`UnitsError`, :class:`BpeModelError`,
    :class:`NonLangSymsError`, :class:`CmvnError`) in one line naming the key, the config and
    every path tried.  ``cmvn_conf.cmvn_file``, which decoding does not read (the checkpoint
    holds the model layer's statistics), is left as it is when found nowhere, and the
    ``bpe_path`` of a char tokenizer is not looked at.  Absolute paths are left to the loaders."""
    config = Path(os.path.abspath(config))  # (".." taken lexically: exp/x/../y/train.yaml is in exp/y)
    exp_dir = config.parent
    bases = list(dict.fromkeys([exp_dir.parent.parent, exp_dir, Path.cwd()]))  # (in order, once each)
    overrides = []
    for key, (error, what) in CONFIG_PATH_KEYS.items():
        if key == "tokenizer_conf.bpe_path" and cfg.tokenizer != "bpe":
            continue
        value = _get(cfg, key)
        if not value or Path(value).is_absolute():
            continue
        tried = [Path(base, value).resolve() for base in bases]
        found = next((path for path in tried if path.exists()), None)
        if found is not None:
            overrides.append(f"{key}={json.dumps(str(found))}")
        elif key != "cmvn_conf.cmvn_file":
            raise error(f"{what} not found: {value} ({key} of {config}; looked for "
                        f"{', '.join(map(str, dict.fromkeys(tried)))}); override {key} with the file's path")
    return overrides


def load_experiment_config(config: str | Path, overrides: Sequence[str] = ()):
    """The ``TrainConfig`` of an experiment's ``config`` (its ``train.yaml``) with
    ``overrides`` (``KEY.PATH=VALUE``), its relative file paths made absolute by
    :func:`resolve_config_paths` -- what recognize and ``asrkit transcribe`` decode with, from
    any working directory."""
    cfg = load_config(config, overrides)
    return load_config(config, [*overrides, *resolve_config_paths(cfg, config)])
