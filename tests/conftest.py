"""Shared fixtures and the per-test time guard.

* ``tiny_corpus`` (session): a real espeak-ng connected-digit corpus, built once per test
  session (about 2 s): 48 train / 12 dev / 12 test utterances, speaker-independent splits,
  Kaldi files plus a raw ``data.list`` per split.  With ``ASRKIT_TEST_CORPUS`` set to the
  archive ``tools/prepare_gpu_carry.py`` makes (a machine without espeak-ng: the GPU check),
  the same corpus is unpacked from there instead of synthesized.
* ``tiny_units`` (session): the char units of its train split (``tools/make_units.py``).
* ``tiny_experiment`` (session): the corpus prepared up to training (units, CMVN, a config).
* Time guard: an unmarked test whose body takes longer than ``ASRKIT_TEST_LIMIT_S``
  (default 20 s alone, 35 s when pytest-xdist runs workers side by side on the cores) fails,
  so the suite keeps to its budget on 2 cores.  Mark genuinely slow tests
  ``@pytest.mark.slow``.  Fixture set-up time is not counted.  The default limit is scaled
  by the machine's pace (``machine_pace``, printed in the header): a host that is slower
  today fails no test for it.
* ``gpu`` tests are skipped when CUDA is not available.
* ``heavy`` tests (long end-to-end runs whose last output is kept in docs/experiments/) run
  only with ``ASRKIT_HEAVY_TESTS=1``; the suite (and CI) skips them, saying so.
* Order: files holding ``slow`` tests run first (the xdist workers then end on short tests).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from tests.helpers import run_tool

# (tests/run.sh runs 2 xdist workers on 2 cores: every test's processes then share the cores
# with another test's, and take up to ~1.7x as long as alone)
_SIDE_BY_SIDE = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1
ALONE_LIMIT_S, SIDE_BY_SIDE_LIMIT_S = 20.0, 35.0
PACE_ENV = "ASRKIT_TEST_PACE"
# Seconds a fresh interpreter took to import torch on the machines the limits were set on
# (2-core AMD EPYC and Intel Xeon, 2.0-2.9 s); the same step took 5-12 s on the Xeon on an
# afternoon its host was loaded, when every test ran ~2x slower.
REFERENCE_IMPORT_S = 3.0


def machine_pace() -> float:
    """How many times slower than the reference this machine runs now (at least 1): a fresh
    interpreter's ``import torch`` -- what most slow tests repeat in their subprocesses, and
    as slowed by a busy host's memory and disk -- timed once per run and shared with the
    xdist workers through ``ASRKIT_TEST_PACE``."""
    if PACE_ENV not in os.environ:
        import subprocess
        import sys
        import time
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", "import torch"], check=False, capture_output=True)
        os.environ[PACE_ENV] = f"{max(1.0, (time.monotonic() - start) / REFERENCE_IMPORT_S):.2f}"
    return float(os.environ[PACE_ENV])


def time_limit_s(side_by_side: bool = _SIDE_BY_SIDE) -> float:
    """The time guard's limit: ``ASRKIT_TEST_LIMIT_S`` as given, else the default (workers side
    by side or not) x the pace."""
    given = os.environ.get("ASRKIT_TEST_LIMIT_S")
    if given:
        return float(given)
    return (SIDE_BY_SIDE_LIMIT_S if side_by_side else ALONE_LIMIT_S) * machine_pace()


def pytest_configure(config):
    machine_pace()  # (in the controller, before the xdist workers start: they inherit the value)


def pytest_report_header(config):
    # (printed by the controller: under xdist its workers' limit, not its own)
    limit = time_limit_s(side_by_side=bool(getattr(config.option, "numprocesses", None)))
    return f"asrkit time guard: {limit:.0f} s per unmarked test (machine pace {machine_pace():.2f})"


def _pin_worker_to_its_cores() -> None:
    """Under pytest-xdist, give worker k its own share of the cores (worker k of n gets
    cores k, k+n, ...): its processes -- the test's, the trainers and agents it starts,
    which inherit the affinity and size their thread pools from it -- then never run more
    threads than the cores they have.  Two workers each spinning two OpenMP threads on
    2 cores stall each other (10x slower steps were seen in test_numerical_faults)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < count:
        return
    mine = cores[int(worker[2:]) % count::count]
    os.sched_setaffinity(0, mine)
    os.environ["OMP_NUM_THREADS"] = str(len(mine))
    import torch
    torch.set_num_threads(len(mine))


_pin_worker_to_its_cores()
TINY_SIZES = {"train": 48, "dev": 12, "test": 12}
TINY_SEED = 7
CARRIED_CORPUS_ENV = "ASRKIT_TEST_CORPUS"


@dataclasses.dataclass(frozen=True)
class CorpusSplit:
    dir: Path
    wav_scp: Path
    text: Path
    utt2spk: Path
    data_list: Path


@dataclasses.dataclass(frozen=True)
class TinyCorpus:
    root: Path
    splits: dict


def build_corpus(root: Path, sizes: dict, seed: int = TINY_SEED) -> TinyCorpus:
    run_tool("synthesize_corpus.py", "--out", root, "--train", sizes["train"], "--dev", sizes["dev"],
             "--test", sizes["test"], "--seed", seed)
    return _with_lists(root, sizes)


def unpack_carried_corpus(archive: Path, root: Path) -> TinyCorpus:
    """The tiny corpus from the carried archive (``tools.carried_corpus``): refused when
    the archive's ``tiny`` corpus was not made with the fixture's sizes and seed."""
    from bench.gpu_stages.corpus import unpack_corpus
    from tools.carried_corpus import read_manifest
    made = read_manifest(archive).get("tiny", {})
    wanted = {**TINY_SIZES, "seed": TINY_SEED}
    if {k: made.get(k) for k in wanted} != wanted:
        raise RuntimeError(f"{CARRIED_CORPUS_ENV}={archive}: its tiny corpus was made with {made}, the fixtures "
                           f"need {wanted} (remake it: python -m tools.prepare_gpu_carry)")
    return _with_lists(unpack_corpus(archive, root, "tiny"), TINY_SIZES)


def _with_lists(root: Path, sizes: dict) -> TinyCorpus:
    splits = {}
    for name in sizes:
        d = root / name
        run_tool("make_raw_list.py", d / "wav.scp", d / "text", d / "data.list")
        splits[name] = CorpusSplit(d, d / "wav.scp", d / "text", d / "utt2spk", d / "data.list")
    return TinyCorpus(root, splits)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> TinyCorpus:
    carried = os.environ.get(CARRIED_CORPUS_ENV)
    if carried:
        return unpack_carried_corpus(Path(carried), tmp_path_factory.mktemp("carried_corpus"))
    return build_corpus(tmp_path_factory.mktemp("tiny_corpus"), TINY_SIZES)


@pytest.fixture(scope="session")
def tiny_units(tiny_corpus, tmp_path_factory) -> Path:
    """The char units file of the tiny corpus's train text, as the recipes make it."""
    units = tmp_path_factory.mktemp("tiny_units") / "units.txt"
    run_tool("make_units.py", tiny_corpus.splits["train"].text, units)
    return units


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except Exception:  # torch missing or broken: gpu tests cannot run either
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    if os.environ.get("ASRKIT_HEAVY_TESTS") != "1":
        heavy = pytest.mark.skip(reason="heavy: run with ASRKIT_HEAVY_TESTS=1 (last output in docs/experiments/)")
        for item in items:
            if "heavy" in item.keywords:
                item.add_marker(heavy)
    # Files with slow tests first (stable otherwise): the parallel workers start on the long
    # runs and end on short ones, instead of one worker finishing a recipe run alone.
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    limit = time_limit_s()
    if (report.when == "call" and report.passed and call.duration > limit
            and item.get_closest_marker("slow") is None):
        report.outcome = "failed"
        report.longrepr = (f"time guard: this test took {call.duration:.1f} s > {limit:.0f} s "
                           f"(machine pace {machine_pace():.2f}); make it faster or mark it @pytest.mark.slow")


@dataclasses.dataclass(frozen=True)
class TinyExperiment:
    """A tiny corpus prepared up to training: units, CMVN and a base config."""

    corpus: TinyCorpus
    units: Path
    cmvn: Path
    root: Path

    def config(self, path: Path, **top) -> Path:
        """Write a tiny training config (see ``tests.helpers.tiny_config_dict``) to ``path``."""
        import yaml
        from tests.helpers import tiny_config_dict
        base = tiny_config_dict(
            cmvn="global_cmvn", cmvn_conf={"cmvn_file": str(self.cmvn)},
            tokenizer="char", tokenizer_conf={"symbol_table_path": str(self.units)},
            dataset_conf={"speed_perturb": False, "spec_aug": False,
                          "fbank_conf": {"num_mel_bins": 40, "dither": 0.0},
                          "batch_conf": {"batch_type": "static", "batch_size": 8},
                          "num_workers": 0},
            max_epoch=1, log_interval=1)
        for key, value in top.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                merged = dict(base[key])
                for k, v in value.items():
                    merged[k] = {**merged[k], **v} if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
                base[key] = merged
            else:
                base[key] = value
        path.write_text(yaml.safe_dump(base), encoding="utf-8")
        return path


@pytest.fixture(scope="module")
def restore_threads():
    """The in-process tools set this process's intra-op threads (``--num_threads``): a module
    that runs them takes this (``pytestmark = pytest.mark.usefixtures("restore_threads")``)
    and the count is put back when the module ends."""
    import torch
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_experiment(tiny_corpus, tiny_units, tmp_path_factory) -> TinyExperiment:
    root = tmp_path_factory.mktemp("tiny_experiment")
    cmvn = root / "global_cmvn"
    exp = TinyExperiment(tiny_corpus, tiny_units, cmvn, root)
    cfg = exp.config(root / "cmvn.yaml")
    run_tool("compute_cmvn_stats.py", "--train_config", cfg, "--data_list",
             tiny_corpus.splits["train"].data_list, "--out_cmvn", cmvn)
    return exp


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module's tests, restored afterwards: small models run
    fastest on one thread and are then immune to a busy machine; the export CLIs and
    WeNet's runtime default to one, too.  Take it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
