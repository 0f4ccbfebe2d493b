"""Helpers shared by tests (import as ``from tests.helpers import ...``)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (for a master/rendezvous port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def repo_env(**extra: str) -> dict:
    """This environment with the repository root first on ``PYTHONPATH`` (a script run as
    ``python tools/x.py`` or ``python bench/x.py`` imports ``asrkit``, ``tools`` and
    ``bench`` from there; see tools/__init__.py), plus ``extra``."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(extra)
    return env


def venv_env(**extra: str) -> dict:
    """This environment without ``PYTHONPATH``: what a user has with only the venv active
    (tools and bench scripts find the repository root themselves), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


def run_tool(script: str, *args, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Run ``tools/<script>`` with this interpreter, capturing text output."""
    cmd = [sys.executable, str(REPO / "tools" / script), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=repo_env(), cwd=kwargs.pop("cwd", REPO), **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def tiny_config_dict(**top) -> dict:
    """A tiny, deterministic conformer config (layer-norm conv module, dropout 0):
    the configuration the equivalence tests use.  Keyword arguments replace top-level keys."""
    cfg = {
        "encoder": "conformer",
        "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64, "num_blocks": 2,
                         "cnn_module_kernel": 3, "cnn_module_norm": "layer_norm", "dropout_rate": 0.0,
                         "positional_dropout_rate": 0.0, "attention_dropout_rate": 0.0},
        "decoder": "transformer",
        "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1, "dropout_rate": 0.0,
                         "positional_dropout_rate": 0.0},
        "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1},
        "optim": "adam",
        "optim_conf": {"lr": 0.002, "betas": [0.9, 0.98], "eps": 1e-9},
        "scheduler_conf": {"warmup_steps": 10},
        "grad_clip": 5.0,
        "log_interval": 1,
    }
    cfg.update(top)
    return cfg


def random_batch(gen, batch: int, feat_dim: int = 80, vocab: int = 10, max_frames: int = 60) -> dict:
    """A batch dict of random features/targets with varied lengths (for model-level tests)."""
    import torch
    lengths = torch.randint(max_frames // 2, max_frames + 1, (batch,), generator=gen)
    lengths[0] = max_frames
    feats = torch.randn(batch, max_frames, feat_dim, generator=gen)
    feats *= (torch.arange(max_frames)[None, :] < lengths[:, None]).unsqueeze(-1)  # zero padding
    tlens = torch.randint(1, 6, (batch,), generator=gen)
    target = torch.full((batch, int(tlens.max())), -1, dtype=torch.long)
    for i, n in enumerate(tlens.tolist()):
        target[i, :n] = torch.randint(2, vocab - 1, (n,), generator=gen)
    return {"keys": [f"u{i}" for i in range(batch)], "feats": feats, "feats_lengths": lengths.long(),
            "target": target, "target_lengths": tlens.long()}


def concat_batches(a: dict, b: dict) -> dict:
    """Concatenate two batch dicts along the batch dimension (padding to the longer)."""
    import torch.nn.functional as F
    import torch
    t = max(a["feats"].size(1), b["feats"].size(1))
    l = max(a["target"].size(1), b["target"].size(1))
    pad_f = lambda x: F.pad(x, (0, 0, 0, t - x.size(1)))
    pad_t = lambda x: F.pad(x, (0, l - x.size(1)), value=-1)
    return {"keys": a["keys"] + b["keys"],
            "feats": torch.cat([pad_f(a["feats"]), pad_f(b["feats"])]),
            "feats_lengths": torch.cat([a["feats_lengths"], b["feats_lengths"]]),
            "target": torch.cat([pad_t(a["target"]), pad_t(b["target"])]),
            "target_lengths": torch.cat([a["target_lengths"], b["target_lengths"]])}


def train_args(exp, model_dir, config, train_list=None, cv_list=None) -> list[str]:
    """Arguments of ``asrkit.bin.train`` for a TinyExperiment (tests/conftest.py); a list of
    ``train_list``/``cv_list`` items passes several."""
    split = exp.corpus.splits

    def items(value, default):
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value or default)]
    return ["--config", str(config), "--train_data", *items(train_list, split["train"].data_list),
            "--cv_data", *items(cv_list, split["dev"].data_list), "--model_dir", str(model_dir),
            "--num_threads", "1"]


def train_here(exp, model_dir, config, *extra, train_list=None, cv_list=None,
               check: bool = True) -> subprocess.CompletedProcess:
    """``asrkit.bin.train.main`` with ``train_args`` in this process (a new interpreter spends
    ~5 s importing torch): returns its exit status and what it wrote to stderr; with
    ``check`` the status must be 0.  The thread count main sets is restored afterwards."""
    import contextlib
    import io

    import torch

    from asrkit.bin.train import main
    argv = [*train_args(exp, model_dir, config, train_list=train_list, cv_list=cv_list), *map(str, extra)]
    err, threads = io.StringIO(), torch.get_num_threads()
    try:
        with contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        torch.set_num_threads(threads)
    assert code == 0 or not check, err.getvalue()[-3000:]
    return subprocess.CompletedProcess(argv, code, "", err.getvalue())


def run_checked(cmd, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd`` (list, or str for bash), raising with its output on failure."""
    if isinstance(cmd, str):
        cmd = ["bash", "-c", cmd]
    env = repo_env(**kwargs.pop("env", {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=kwargs.pop("cwd", REPO), env=env,
                          timeout=timeout, **kwargs)
    if proc.returncode != 0:
        raise AssertionError(f"command failed ({proc.returncode}): {cmd}\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-6000:]}")
    return proc


def distinct_utterance_list(src_list: Path, dst: Path, count: int) -> Path:
    """A data.list of the first ``count`` utterances of ``src_list``, in list order (distinct
    audio and transcripts of different lengths: every batch is a different batch)."""
    lines = Path(src_list).read_text().splitlines()
    if len(lines) < count:
        raise ValueError(f"{src_list} has {len(lines)} utterances, fewer than {count}")
    Path(dst).write_text("".join(line + "\n" for line in lines[:count]))
    return dst


def tensorboard_scalars(log_dir: Path, tag: str) -> list:
    """``[(step, value)]`` of scalar ``tag`` in the TensorBoard event files under ``log_dir``
    (full float32 precision, unlike the 3 decimals of a log line)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def plain_env() -> dict:
    """This environment without torchrun's variables (ranks get launch flags instead)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    return dict(env, PYTHONPATH=str(REPO))


# What a torch_fsdp rank imports on its first use of FSDP: fully_shard's DTensors import
# torch._dynamo (~1.4 s on these machines), FSDP itself ~0.8 s.
FSDP_MODULES = ("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.checkpoint.state_dict")


def forked_torchrun_args(entry: list[str], args: list[str], nproc: int = 2, max_restarts: int = 0) -> list[str]:
    """The arguments of ``tests.forked_torchrun`` (torchrun's agent, workers forked from it):
    ``nproc`` workers of ``entry`` (``["-m", "asrkit.bin.train"]``, or ``tests.hooked_train``
    with its hook options and ``--``) with ``args``, on a free port of 127.0.0.1, with
    ``--max_restarts``.  Run them with :func:`fork_main` (``fork_main("tests.forked_torchrun",
    ...)``): the agent then starts from the fork server with torch, asrkit and what FSDP
    imports on its first use imported (:data:`FORK_SERVER_PRELOAD`)."""
    return ["--nproc_per_node", str(nproc), "--max_restarts", str(max_restarts),
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *entry, *map(str, args)]


# What the fork server imports once, before it forks a rank or an agent (fork_ranks, fork_main)
FORK_SERVER_PRELOAD = ("torch", "asrkit.bin.train", "asrkit.train.entry", "torch.distributed.run",
                       "tests.forked_torchrun", *FSDP_MODULES)


def fork_server_context():
    """``multiprocessing``'s ``forkserver`` context, its server preloading
    :data:`FORK_SERVER_PRELOAD`: the fork server of :func:`fork_ranks` (one per pytest process,
    started on first use).  Its processes start with torch imported and from a clean process
    (see :func:`fork_ranks`); a target must be importable by name (a module-level function)."""
    import multiprocessing  # defer: only the tests that start processes
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(FORK_SERVER_PRELOAD))
    return ctx


def spawn_ranks(fn, args: tuple = (), nprocs: int = 2) -> None:
    """``torch.multiprocessing.spawn(fn, args, nprocs, join=True)`` -- ``fn(i, *args)`` in
    ``nprocs`` processes, an exception in any raised here -- with the processes forked from
    :func:`fork_server_context`'s server instead of new interpreters (~3-5 s each)."""
    import torch.multiprocessing as mp  # defer: only the tests that start processes
    fork_server_context()  # (the server's preload, should this start it)
    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="forkserver")


def fork_ranks(rank_argvs: list[list[str]], timeout: float = 240,
               check: bool = False) -> list[tuple[int, str, str]]:
    """Ranks 0..N-1 of one gloo job, rank r running ``asrkit.bin.train``'s ``main`` with
    ``rank_argvs[r]`` and the legacy launch flags appended (``--rank/--world_size/--dist_backend
    gloo/--init_method tcp://``); waits for all and returns ``(exit status, stdout, stderr)``
    per rank.  No rank is left running (after ``timeout`` s they are killed).  With ``check``
    every rank must end with status 0 (AssertionError with their stderr's tails otherwise).

    Each rank is a process forked by a fork server (``multiprocessing``'s ``forkserver``): a
    fresh interpreter that this process starts on first use, which imports
    :data:`FORK_SERVER_PRELOAD` (torch, asrkit's trainer, what FSDP imports) once, then forks
    one rank per request.  A rank so starts with all of that imported, instead of ~3-5 s
    importing it again (~2 s more for FSDP), and from a clean process: not forked from this
    pytest worker, whose earlier tests may have
    left native threads (compile workers, gloo, autograd) that a forked child inherits in an
    unusable state (a forked comm-hooks rank aborted so).  A rank ends with ``main``'s status
    without the interpreter's finalization, as ``asrkit.bin.train`` does
    (:func:`asrkit.train.entry.exit_process`); its stdout and stderr go to files of its own,
    its environment is :func:`plain_env`'s and its working directory the repository."""
    port, world = free_port(), len(rank_argvs)
    argvs = [[*map(str, argv), "--rank", str(rank), "--world_size", str(world), "--dist_backend", "gloo",
              "--init_method", f"tcp://127.0.0.1:{port}"] for rank, argv in enumerate(rank_argvs)]
    results = _fork_and_wait([("asrkit.bin.train", argv) for argv in argvs], timeout)
    assert not check or all(code == 0 for code, _, _ in results), \
        "\n".join(f"rank {rank} ended with status {code}:\n{err[-3000:]}" for rank, (code, _, err) in enumerate(results))
    return results


def fork_main(module: str, argv: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    """``module.main(argv)`` in a process forked by :func:`fork_ranks`' fork server, as
    ``python -m module argv`` would run it (``main``'s status; its stdout and stderr), without
    a new interpreter's imports; killed after ``timeout`` s."""
    [(code, out, err)] = _fork_and_wait([(module, [*map(str, argv)])], timeout)
    return subprocess.CompletedProcess([module, *argv], code, out, err)


def _fork_and_wait(mains: list[tuple[str, list[str]]], timeout: float) -> list[tuple[int, str, str]]:
    """Fork one process per ``(module, argv)`` of ``mains`` from the fork server, wait for all
    (killing what is left after ``timeout`` s): ``(exit status, stdout, stderr)`` each."""
    import tempfile
    import time

    ctx = fork_server_context()
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        try:
            for i, (module, argv) in enumerate(mains):
                proc = ctx.Process(target=_child_main, args=(module, argv, f"{tmp}/{i}.out", f"{tmp}/{i}.err",
                                                             plain_env()))
                proc.start()
                procs.append(proc)
            deadline = time.monotonic() + timeout
            for proc in procs:
                proc.join(max(0.0, deadline - time.monotonic()))
        finally:
            for proc in procs:
                if proc.exitcode is None:
                    proc.kill()
                    proc.join()
        read = lambda path: Path(path).read_text(errors="replace") if Path(path).is_file() else ""
        return [(proc.exitcode, read(f"{tmp}/{i}.out"), read(f"{tmp}/{i}.err")) for i, proc in enumerate(procs)]


def _child_main(module: str, argv: list[str], out: str, err: str, env: dict) -> None:
    """The body of a forked process: ``module.main(argv)`` with stdout/stderr on ``out``/``err``."""
    code = 70
    try:
        # A fork server's child inherits "forkserver" as its default start method; a rank
        # under torchrun has Linux's "fork".  Without this, each DataLoader worker started a
        # fork server of its own and imported torch and asrkit again: ~5 s per loader start.
        import importlib  # defer: the child's body only
        import multiprocessing  # defer: the child's body only
        multiprocessing.set_start_method("fork", force=True)
        for fd, path in ((1, out), (2, err)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        sys.stdout = open(1, "w", closefd=False, buffering=1)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(REPO)
        from asrkit.train.entry import status_of
        code = status_of(lambda: importlib.import_module(module).main(argv))
    except SystemExit as e:  # (argparse)
        code = e.code if isinstance(e.code, int) else 2
    finally:
        try:
            from asrkit.train.entry import end_children
            end_children()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def cpuinfo_flags() -> set[str]:
    """The ``flags`` of /proc/cpuinfo's first processor (empty where there is none)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


FSDD_ARCHIVE = REPO / "corpora" / "fsdd" / "recordings.tar.gz"


def fsdd_takes(speaker: str, takes: range = range(2)) -> list[tuple[str, "object", str]]:
    """``(name, float32 samples, digit word)`` of the shipped FSDD recordings of ``speaker``
    (``corpora/fsdd``, 8 kHz), the given take numbers of every digit, read from the archive."""
    import io
    import tarfile

    import soundfile

    from tools.prepare_fsdd import WORDS
    wanted = {f"recordings/{d}_{speaker}_{t}.flac": WORDS[d] for d in range(10) for t in takes}
    found = {}
    with tarfile.open(FSDD_ARCHIVE) as tar:
        for member in tar:
            if member.name in wanted:
                samples, rate = soundfile.read(io.BytesIO(tar.extractfile(member).read()), dtype="float32")
                assert rate == 8000, member.name
                found[member.name] = samples
    assert len(found) == len(wanted), sorted(set(wanted) - set(found))
    return [(name.split("/")[1], found[name], wanted[name]) for name in sorted(wanted)]


def connected_takes(pieces: list, rate: int = 8000, gap_s: float = 0.2):
    """One utterance of ``pieces`` (float32 arrays) in a row, ``gap_s`` of silence around each."""
    import numpy as np
    gap = np.zeros(int(gap_s * rate), np.float32)
    return np.concatenate([part for piece in pieces for part in (gap, piece)] + [gap])
