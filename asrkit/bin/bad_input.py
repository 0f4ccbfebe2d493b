"""What the command-line tools count as bad input: a file the user handed in (config, units,
BPE model, non-linguistic symbols, CMVN, checkpoint, data list) that is missing or
malformed.  Each tool reports it in one line and exits with status 2; other failures (a
write that failed, a bug) exit 1.

:func:`load_text_inputs` reads and checks the units, BPE, non-linguistic symbols and CMVN
files of a config before a tool builds its model, so their problems are found first and
reported the same way by every tool."""
from __future__ import annotations

import argparse
import logging
from typing import Callable

from asrkit.config import ConfigError
from asrkit.data.features import CmvnError, load_cmvn
from asrkit.data.lists import ListError
from asrkit.io.checkpoint import CheckpointError
from asrkit.models.registry import build_cmvn, check_cmvn_placement
from asrkit.text.tokenizer import BpeModelError, Tokenizer, build_tokenizer
from asrkit.text.units import UnitsError
from asrkit.text.wenet import NonLangSymsError

BAD_INPUT = (ConfigError, CheckpointError, ListError, UnitsError, BpeModelError, NonLangSymsError, CmvnError,
             FileNotFoundError)


def load_text_inputs(cfg, *, model_cmvn: bool) -> Tokenizer:
    """The tokenizer of ``cfg`` (a ``TrainConfig``), after checking every units/BPE/CMVN
    file the tool reads: the units file and its ``special_tokens`` declaration
    (:class:`UnitsError`), the sentencepiece model (:class:`BpeModelError`), the
    non-linguistic symbols (:class:`NonLangSymsError`),
    ``ctc_conf.ctc_blank_id`` against the units' ``<blank>`` (when the model has a CTC
    head) and the CMVN files (:class:`CmvnError`, their dimension against
    ``fbank_conf.num_mel_bins``): ``dataset_conf.cmvn_file`` always, ``cmvn_conf.cmvn_file``
    of the model layer only with ``model_cmvn`` (training: decoding and export take those
    statistics from the checkpoint)."""
    if model_cmvn:
        check_cmvn_placement(cfg)
    tokenizer = build_tokenizer(cfg)
    blank = tokenizer.vocabulary.blank_id
    if cfg.model_conf.ctc_weight > 0.0 and cfg.ctc_conf.ctc_blank_id != blank:
        raise UnitsError(f"ctc_conf.ctc_blank_id is {cfg.ctc_conf.ctc_blank_id} but "
                         f"{cfg.tokenizer_conf.symbol_table_path} has <blank> at id {blank}: "
                         f"set ctc_conf.ctc_blank_id: {blank}")
    dim = cfg.dataset_conf.fbank_conf.num_mel_bins
    if cfg.dataset_conf.cmvn_file:
        load_cmvn(cfg.dataset_conf.cmvn_file, dim)
    if model_cmvn:
        build_cmvn(cfg, dim, load_stats=True)  # (read and checked; the model builds its own later)
    return tokenizer


def run_tool(run: Callable[[argparse.Namespace], int], args: argparse.Namespace, log: logging.Logger,
             bad_input: tuple[type[BaseException], ...] = (), hints: dict[type, str] | None = None) -> int:
    """``run(args)`` with the tools' exit statuses and logging: bad input (:data:`BAD_INPUT`
    and the tool's own ``bad_input`` types) logged in one line, status 2; an exception of a
    type in ``hints`` logged with its hint, and ``ValueError``/``OSError``/``RuntimeError``
    logged as they are, status 1.  Logging is configured first (INFO, timestamped)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        return run(args)
    except (*bad_input, *BAD_INPUT) as e:  # what was handed in: one line, status 2
        log.error("%s", e)
        return 2
    except (*(hints or {}), ValueError, OSError, RuntimeError) as e:
        hint = next((h for t, h in (hints or {}).items() if isinstance(e, t)), "")
        log.error("%s%s", e, f": {hint}" if hint else "")
        return 1
