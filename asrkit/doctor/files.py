"""The ``config`` and ``files`` checks: what the training will read on this node.

The config is loaded as the training loads it (``--override`` applied), then checked with
the training's own preflight (``asrkit.train.preflight``: data lists, units, BPE model,
non-linguistic symbols and CMVN files exist; dtype, device and sync-batchnorm fit this
node).  When those files exist they are read by the loaders the training uses: the
units/BPE/CMVN files by ``asrkit.config_files.load_model_inputs``, each
data list by ``asrkit.data.lists.read_list`` (every line parsed), and the audio of the first
``audio_entries`` entries of each list by ``asrkit.data.audio.load_audio``.

:func:`check_inputs` also returns the :class:`JobInputs` the nodes compare in the
rendezvous (the config as a dict and the files by label, as ``asrkit.train.agreement``
names them).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from asrkit.config import load_config, to_dict

from asrkit.schema import ConfigError
from asrkit.data.audio import DataFault, load_audio
from asrkit.data.lists import ListError, read_list
from asrkit.doctor.results import CheckResult, fail, first_line, ok, warn
from asrkit.config_files import BAD_INPUT, load_model_inputs
from asrkit.train import agreement
from asrkit.train.dist import LaunchError, resolve_backend
from asrkit.train.job import TrainJob
from asrkit.train.preflight import list_file_problem, preflight
from asrkit.train.problems import Problem, ProblemKind

PREPARE_FIX = ("prepare the data on this node (bash run.sh --stage 0 --stop_stage 3 with the same options), "
               "or run the doctor from the recipe directory with the paths the recipe passes")


@dataclasses.dataclass
class JobInputs:
    """What this node's training would read: ``config`` (the resolved config as a dict; None
    when it could not be loaded, with the reason in ``problem``), ``files`` (label -> path, or
    a shard-index fingerprint, as ``asrkit.train.agreement.job_files``/``shard_indexes`` give),
    and ``dist_backend`` (the config's ``launch.dist_backend``, None without a config)."""

    config: Optional[dict]
    files: dict
    dist_backend: Optional[str] = None
    problem: str = ""


def _problem_line(problem: Problem) -> CheckResult:
    """A preflight problem as a line: a missing file is a ``files`` FAIL with the prepare
    fix, an unset path or an unusable one (an empty list) a ``files`` FAIL, the others
    ``config`` FAILs with their own fix."""
    if problem.kind is ProblemKind.MISSING_FILE:
        return fail("files", problem.what, PREPARE_FIX)
    if problem.kind is ProblemKind.UNSET_PATH:
        return fail("files", problem.what, "set it in the config (or --override KEY=PATH)")
    if problem.kind is ProblemKind.UNUSABLE_PATH:
        return fail("files", problem.what, problem.fix)
    return fail("config", problem.what, problem.fix)


def load_job_config(config_path: str, overrides: list[str]):
    """``(TrainConfig, None)`` or ``(None, CheckResult)`` for a config that does not load."""
    try:
        return load_config(config_path, overrides), None
    except ConfigError as e:
        fix = ("pass --config with the training config the recipe uses (its --train_config)"
               if not Path(config_path).is_file() else "fix the config as the message says")
        return None, fail("config", first_line(e, None) + (f" (and {len(e.errors) - 1} more problem(s))"
                                                          if len(e.errors) > 1 else ""), fix)


def check_text_inputs(cfg) -> list[CheckResult]:
    """Units / BPE / CMVN read by the training's loaders: one OK line, or a FAIL."""
    try:
        tokenizer = load_model_inputs(cfg, model_cmvn=True).tokenizer
    except BAD_INPUT as e:
        return [fail("files", first_line(e, None), "rebuild the file on this node (run.sh stages 1-2) or fix "
                                                   "the config key that names it")]
    parts = [f"units {cfg.tokenizer_conf.symbol_table_path} ({len(tokenizer.symbols)} units)"]
    if cfg.tokenizer == "bpe" and cfg.tokenizer_conf.bpe_path:
        parts.append(f"BPE model {cfg.tokenizer_conf.bpe_path}")
    if cfg.tokenizer_conf.non_lang_syms_path:
        parts.append(f"non-linguistic symbols {cfg.tokenizer_conf.non_lang_syms_path}")
    for cmvn in dict.fromkeys(filter(None, (cfg.cmvn_conf.cmvn_file if cfg.cmvn else None,
                                            cfg.dataset_conf.cmvn_file))):
        parts.append(f"CMVN {cmvn} ({cfg.dataset_conf.feat_dim} dims)")
    return [ok("files", ", ".join(parts) + ": readable")]


def check_data_list(label: str, path: str, audio_entries: int) -> CheckResult:
    """Parse the whole list with the training's reader, then load the audio of its first
    ``audio_entries`` entries; one line."""
    try:
        entries = read_list(path)
    except (ListError, OSError) as e:
        return fail("files", f"{label} {path}: {first_line(e)}",
                    "rewrite the list on this node (run.sh stage 3) or fix the line named")
    if not entries:
        return fail("files", f"{label} {path}: no entries", PREPARE_FIX)
    seconds = sum(e.duration for e in entries)
    length = f"{seconds / 3600:.1f} h" if seconds >= 360 else f"{seconds:.0f} s"
    rates = set()
    for entry in entries[:audio_entries]:
        try:
            wav, rate = load_audio(entry)
        except DataFault as e:
            where = entry.wav if entry.wav is not None else f"{entry.tar} member {entry.key}"
            return fail("files", f"{label} {path}: the audio of entry {entry.key} ({where}) is unreadable: "
                                 f"{e.reason}: {first_line(e)}",
                        "copy the corpus to the same path on this node (the lists hold the audio paths stage 0 "
                        "wrote), or rerun data preparation here")
        rates.add(rate)
        del wav
    shown = min(audio_entries, len(entries))
    what = (f"{label} {path}: {len(entries)} entries ({length}), audio of the first {shown} readable"
            + (f" ({', '.join(f'{r} Hz' for r in sorted(rates))})" if rates else ""))
    return ok("files", what)


def check_inputs(config_path: str, overrides: list[str], train_data: str, cv_data: str,
                 audio_entries: int = 3) -> tuple[list[CheckResult], JobInputs]:
    """The ``config`` and ``files`` lines, and what the nodes compare (see the module doc)."""
    cfg, failure = load_job_config(config_path, overrides)
    if cfg is None:
        files = {"train data list": train_data, "CV data list": cv_data}
        results = [failure]
        for label, path in files.items():  # (the lists do not depend on the config)
            results.append(check_data_list(label, path, audio_entries) if Path(path).is_file() else
                           fail("files", f"{label} {path}: file not found", PREPARE_FIX))
        return results, JobInputs(None, files, None, failure.what)
    config = to_dict(cfg)
    results = [ok("config", f"{config_path} loaded" + (f" with {len(overrides)} override(s)" if overrides else "")
                  + f": {cfg.encoder} encoder, {cfg.decoder} decoder, {cfg.tokenizer} tokenizer, "
                    f"launch.timeout_s {cfg.launch.timeout_s:g}"), check_engine(cfg)]
    # (an unusable backend is the versions check's line; preflight then judges as for gloo)
    job = TrainJob(config=config_path, train_data=train_data, cv_data=cv_data, model_dir=Path("."),
                   overrides=tuple(overrides))
    problems = preflight(cfg, job, _backend_or_none(cfg) or "gloo")
    results.extend(_problem_line(p) for p in problems)
    if not any(r.check == "files" for r in results[1:]):
        results.extend(check_text_inputs(cfg))
    for label, path in (("train data list", train_data), ("CV data list", cv_data)):
        if list_file_problem(label, path) is None:  # (else preflight's line says what is wrong)
            results.append(check_data_list(label, path, audio_entries))
    if train_data == cv_data:
        results.append(warn("files", f"the train and CV data lists are the same file ({train_data})",
                            "pass the dev set's list as --cv_data"))
    files = {**agreement.job_files(config, train_data, cv_data),
             **agreement.shard_indexes(train_data, cv_data, None)}
    return results, JobInputs(config, files, cfg.launch.dist_backend)


def check_engine(cfg) -> CheckResult:
    """The ``engine`` line: the training engine the config asks for and, for ``torch_fsdp``,
    whether this torch has what it needs (FSDP2's ``fully_shard``, ``torch.distributed.checkpoint``);
    the settings it cannot run with are preflight's lines."""
    if cfg.train_engine != "torch_fsdp":
        return ok("engine", f"train_engine {cfg.train_engine}: the model replicated on every rank")
    try:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict  # noqa: F401 (what FSDP needs)
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError as e:
        return fail("engine", f"train_engine torch_fsdp needs torch.distributed.fsdp.fully_shard and "
                              f"torch.distributed.checkpoint, which this torch lacks ({first_line(e)})",
                    "install torch >= 2.6, or use train_engine: torch_ddp")
    return ok("engine", f"train_engine torch_fsdp, fsdp_sharding_strategy {cfg.fsdp_sharding_strategy}: "
                        f"fully_shard and torch.distributed.checkpoint available; every rank writes its shards "
                        f"into --model_dir, which must be one shared folder for all nodes")


def _backend_or_none(cfg) -> Optional[str]:
    """The resolved backend, or None when it cannot be resolved (the versions check says why)."""
    try:
        return resolve_backend(cfg.launch.dist_backend)
    except LaunchError:
        return None
