"""The files a config names besides its data -- units, BPE model, non-linguistic symbols,
CMVN statistics -- read and checked once, before a model is built, and what counts as bad
input: a file the user handed in that is missing or malformed.

:func:`load_model_inputs` returns them loaded (:class:`ModelInputs`), so a training run
builds its tokenizer, sample processors and model from what was checked instead of reading
the files again.  Every tool reports :data:`BAD_INPUT` in one line and exits with status 2
(``asrkit.bin.bad_input.run_tool``; ``asrkit.train.run``)."""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from asrkit.config import ConfigError
from asrkit.data.features import CmvnError, load_cmvn
from asrkit.data.lists import ListError
from asrkit.io.checkpoint import CheckpointError
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
    ``fbank_conf.num_mel_bins``): ``dataset_conf.cmvn_file`` always, ``cmvn_conf.cmvn_file``
    of the model layer only with ``model_cmvn`` (training)."""
    if model_cmvn:
        check_cmvn_placement(cfg)
    tokenizer = build_tokenizer(cfg)
    blank = tokenizer.vocabulary.blank_id
    if cfg.model_conf.ctc_weight > 0.0 and cfg.ctc_conf.ctc_blank_id != blank:
        raise UnitsError(f"ctc_conf.ctc_blank_id is {cfg.ctc_conf.ctc_blank_id} but "
                         f"{cfg.tokenizer_conf.symbol_table_path} has <blank> at id {blank}: "
                         f"set ctc_conf.ctc_blank_id: {blank}")
    dim = cfg.dataset_conf.fbank_conf.num_mel_bins
    data_stats = load_cmvn(cfg.dataset_conf.cmvn_file, dim) if cfg.dataset_conf.cmvn_file else None
    model_stats = model_cmvn_stats(cfg, dim) if model_cmvn else None
    return ModelInputs(tokenizer, data_stats, model_stats)


def load_text_inputs(cfg, *, model_cmvn: bool) -> Tokenizer:
    """The tokenizer of ``cfg``, after :func:`load_model_inputs` checked every file."""
    return load_model_inputs(cfg, model_cmvn=model_cmvn).tokenizer
