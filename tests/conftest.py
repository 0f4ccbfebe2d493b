"""Shared fixtures and the per-test time guard.

* ``tiny_corpus`` (session): a real espeak-ng connected-digit corpus, built once per test
  session (about 2 s): 48 train / 12 dev / 12 test utterances, speaker-independent splits,
  Kaldi files plus a raw ``data.list`` per split.
* Time guard: an unmarked test whose body takes longer than ``ASRKIT_TEST_LIMIT_S``
  (default 20 s) fails, so the suite keeps to its 10-minute budget on 2 cores.  Mark
  genuinely slow tests ``@pytest.mark.slow``.  Fixture set-up time is not counted.
* ``gpu`` tests are skipped when CUDA is not available.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from tests.helpers import run_tool

TEST_LIMIT_S = float(os.environ.get("ASRKIT_TEST_LIMIT_S", "20"))
TINY_SIZES = {"train": 48, "dev": 12, "test": 12}


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


def build_corpus(root: Path, sizes: dict, seed: int = 7) -> TinyCorpus:
    run_tool("synthesize_corpus.py", "--out", root, "--train", sizes["train"], "--dev", sizes["dev"],
             "--test", sizes["test"], "--seed", seed)
    splits = {}
    for name in sizes:
        d = root / name
        run_tool("make_raw_list.py", d / "wav.scp", d / "text", d / "data.list")
        splits[name] = CorpusSplit(d, d / "wav.scp", d / "text", d / "utt2spk", d / "data.list")
    return TinyCorpus(root, splits)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> TinyCorpus:
    return build_corpus(tmp_path_factory.mktemp("tiny_corpus"), TINY_SIZES)


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (report.when == "call" and report.passed and call.duration > TEST_LIMIT_S
            and item.get_closest_marker("slow") is None):
        report.outcome = "failed"
        report.longrepr = (f"time guard: this test took {call.duration:.1f} s > {TEST_LIMIT_S:.0f} s; "
                           f"make it faster or mark it @pytest.mark.slow")
