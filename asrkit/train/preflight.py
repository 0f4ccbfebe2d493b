"""``preflight``: what can be found wrong with a training job before any heavy work -- the
files it names exist (the data lists with at least one entry line, ``model_dir`` a
directory or not there yet), the config's device/dtype/sync-batchnorm/communication-hook settings
fit this node, and the job's options agree.  Used by the training (``asrkit.train.run``)
and by ``asrkit doctor``; each finding is a :class:`~asrkit.train.problems.Problem`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from asrkit.config import TrainConfig
from asrkit.data.mixing import ListSpecError
from asrkit.data.noise_lists import AudioListError, read_audio_list
from asrkit.train.dist import check_sync_batchnorm, comm_hook_problem, resolve_backend
from asrkit.train.engines.problems import engine_problems
from asrkit.train.job import TrainJob
from asrkit.train.problems import Problem, ProblemKind, missing_file


def preflight(cfg: TrainConfig, job: TrainJob, backend: Optional[str] = None) -> list[Problem]:
    """Every problem of running ``job`` with its loaded config ``cfg`` on ``job.device``
    (empty when there is none).  ``backend``: the resolved process-group backend (default:
    the config's ``launch.dist_backend`` resolved for this node)."""
    device = torch.device(job.device)
    backend = backend or resolve_backend(cfg.launch.dist_backend)
    return [*data_list_problems(job), *model_dir_problems(job), *config_file_problems(cfg),
            *augmentation_list_problems(cfg), *setting_problems(cfg, device, backend), *option_problems(job)]


def data_list_problems(job: TrainJob) -> list[Problem]:
    """The train and CV lists: each must be a file with at least one non-blank line (and the
    ``--train_data`` items well-formed: ``asrkit.data.mixing``)."""
    problems = []
    try:
        train = job.train_mix.paths
    except ListSpecError as e:
        return [Problem(ProblemKind.UNUSABLE_PATH, str(e), "write each list as PATH or PATH:WEIGHT")]
    for flag, path in (*(("--train_data", p) for p in train), *(("--cv_data", p) for p in job.cv_lists)):
        problem = list_file_problem(flag, path)
        if problem:
            problems.append(problem)
    return problems


def list_file_problem(label: str, path) -> Optional[Problem]:
    """``path`` (a data list) is missing, unreadable or holds no non-blank line; None when it
    has one (only the lines up to the first non-blank one are read: the list's own reader
    checks the rest)."""
    if not Path(path).is_file():
        return missing_file(label, path)
    try:
        with open(path, "rb") as f:
            if any(line.strip() for line in f):
                return None
    except OSError as e:
        return Problem(ProblemKind.UNUSABLE_PATH, f"{label} {path}: cannot be read ({e.strerror or e})",
                       "check its permissions")
    return Problem(ProblemKind.UNUSABLE_PATH, f"{label} {path}: the data list is empty (no entry line)",
                   "write the list again (run.sh stage 3) or pass the right one")


def model_dir_problems(job: TrainJob) -> list[Problem]:
    """``model_dir`` (or the nearest of its parents that exists) must be a directory."""
    path = Path(job.model_dir)
    for existing in (path, *path.parents):
        if existing.exists():
            break
    else:
        return []
    if existing.is_dir():
        return []
    where = "" if existing == path else f" (its parent {existing} is a file)"
    return [Problem(ProblemKind.UNUSABLE_PATH, f"--model_dir {path}: not a directory{where}",
                    "pass a directory (it is created when missing)")]


def config_file_problems(cfg: TrainConfig) -> list[Problem]:
    """The units, BPE model, non-linguistic symbols and CMVN files the config names."""
    problems = []
    units = cfg.tokenizer_conf.symbol_table_path
    if cfg.reads_units_file and not units:
        problems.append(Problem(ProblemKind.UNSET_PATH, "tokenizer_conf.symbol_table_path is not set (the "
                                                        "units.txt of tools/make_units.py)"))
    elif cfg.reads_units_file and not Path(units).is_file():
        problems.append(missing_file("tokenizer_conf.symbol_table_path", units))
    if cfg.tokenizer == "bpe" and cfg.tokenizer_conf.bpe_path and not Path(cfg.tokenizer_conf.bpe_path).is_file():
        problems.append(missing_file("tokenizer_conf.bpe_path", cfg.tokenizer_conf.bpe_path))
    syms = cfg.tokenizer_conf.non_lang_syms_path
    if syms is not None and not Path(syms).is_file():
        problems.append(missing_file("tokenizer_conf.non_lang_syms_path", syms))
    cmvn_file = cfg.cmvn_conf.cmvn_file if cfg.cmvn else None
    if cmvn_file and not Path(cmvn_file).is_file():
        problems.append(missing_file("cmvn_conf.cmvn_file", cmvn_file))
    return problems


def augmentation_list_problems(cfg: TrainConfig) -> list[Problem]:
    """The noise and RIR lists of the augmentations switched on: each must be a readable,
    non-empty list whose every line is in a layout ``asrkit.data.noise_lists`` reads (the
    files they name are read when drawn; an unreadable one is a counted skip then)."""
    dc = cfg.dataset_conf
    lists = [("dataset_conf.noise_conf.noise_scp", dc.noise_conf.noise_scp, dc.noise),
             ("dataset_conf.reverb_conf.rir_scp", dc.reverb_conf.rir_scp, dc.reverb)]
    problems = []
    for label, path, used in lists:
        if not used or not path:
            continue
        try:
            read_audio_list(path, label)
        except AudioListError as e:
            kind = ProblemKind.MISSING_FILE if not Path(path).is_file() else ProblemKind.UNUSABLE_PATH
            problems.append(Problem(kind, str(e)))
    return problems


def setting_problems(cfg: TrainConfig, device: torch.device, backend: str) -> list[Problem]:
    """dtype against the device, sync_batchnorm and the communication hook against the
    backend and device, the training engine's settings, keep_global_batch against
    reference_world_size."""
    problems = []
    # (on a CPU every dtype runs, decided by its flags: asrkit.train.precision, logged at build)
    if cfg.dtype == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        problems.append(Problem(ProblemKind.SETTING,
                                "dtype: bf16 is not supported by this GPU (it needs compute capability 8.0+, e.g. "
                                "A100/H100)", "use dtype: fp16 (with loss scaling) or fp32"))
    if cfg.sync_batchnorm:
        problem = check_sync_batchnorm(backend, device)
        if problem:
            problems.append(problem)
    problem = comm_hook_problem(cfg.ddp_conf.comm_hook, backend, device)
    if problem:
        problems.append(problem)
    problems.extend(engine_problems(cfg, device))  # (train_engine and its fsdp_* keys)
    if cfg.keep_global_batch and not cfg.reference_world_size:
        problems.append(Problem(ProblemKind.SETTING, "keep_global_batch: true needs reference_world_size (the "
                                                     "number of ranks the config was tuned on, e.g. 4)"))
    return problems


def option_problems(job: TrainJob) -> list[Problem]:
    """The checkpoint to resume from, ``init`` and the warm start."""
    problems = []
    if job.resumes_explicitly() and not Path(job.checkpoint).is_file():
        problems.append(missing_file("--checkpoint", job.checkpoint))
    if job.init and not Path(job.init.checkpoint).is_file():
        problems.append(missing_file("--enc_init", job.init.checkpoint))
    warm = job.warm_start
    if warm:
        problem = list_file_problem("--warm_start_data", warm.data)
        if problem:
            problems.append(problem)
        if warm.steps <= 0:
            problems.append(Problem(ProblemKind.OPTIONS,
                                    "--warm_start_data needs --warm_start_steps N (N > 0 optimizer steps)"))
        if job.init:
            problems.append(Problem(ProblemKind.OPTIONS,
                                    "--warm_start_data and --enc_init both choose the starting model: give one"))
    return problems
