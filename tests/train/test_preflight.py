"""``asrkit.train.preflight``: typed problems, found before any heavy work, and how
``asrkit doctor`` reads them (by kind, not by their text)."""
from __future__ import annotations

import dataclasses

from asrkit.config import load_config
from asrkit.doctor.files import PREPARE_FIX, check_inputs
from asrkit.train.job import ModuleInit, TrainJob, WarmStart
from asrkit.train.preflight import preflight
from asrkit.train.problems import ProblemKind


def _job(exp, tmp_path, config, **fields) -> TrainJob:
    split = exp.corpus.splits
    return TrainJob(config=str(config), train_data=str(split["train"].data_list),
                    cv_data=str(split["dev"].data_list), model_dir=tmp_path / "exp", device="cpu", **fields)


def test_each_problem_has_its_kind_and_prints_as_the_trainer_did(tiny_experiment, tmp_path):
    config = tiny_experiment.config(tmp_path / "c.yaml", keep_global_batch=True,
                                    tokenizer_conf={"symbol_table_path": ""})
    job = _job(tiny_experiment, tmp_path, config, checkpoint=str(tmp_path / "none.pt"),
               init=ModuleInit(str(tmp_path / "enc.pt")), warm_start=WarmStart(str(tmp_path / "w.list"), 0))
    job = dataclasses.replace(job, cv_data=str(tmp_path / "dev.list"))
    problems = preflight(load_config(config), job, "gloo")
    assert [(p.kind, str(p)) for p in problems] == [
        (ProblemKind.MISSING_FILE, f"--cv_data {tmp_path}/dev.list: file not found"),
        (ProblemKind.UNSET_PATH, "tokenizer_conf.symbol_table_path is not set (the units.txt of tools/make_units.py)"),
        (ProblemKind.SETTING, "keep_global_batch: true needs reference_world_size (the number of ranks the config "
                              "was tuned on, e.g. 4)"),
        (ProblemKind.MISSING_FILE, f"--checkpoint {tmp_path}/none.pt: file not found"),
        (ProblemKind.MISSING_FILE, f"--enc_init {tmp_path}/enc.pt: file not found"),
        (ProblemKind.MISSING_FILE, f"--warm_start_data {tmp_path}/w.list: file not found"),
        (ProblemKind.OPTIONS, "--warm_start_data needs --warm_start_steps N (N > 0 optimizer steps)"),
        (ProblemKind.OPTIONS, "--warm_start_data and --enc_init both choose the starting model: give one")]
    assert preflight(load_config(tiny_experiment.config(tmp_path / "ok.yaml")),
                     _job(tiny_experiment, tmp_path, config), "gloo") == []


def test_the_doctor_sorts_problems_by_kind(tiny_experiment, tmp_path):
    config = tiny_experiment.config(tmp_path / "c.yaml", keep_global_batch=True,
                                    tokenizer_conf={"symbol_table_path": ""})
    split = tiny_experiment.corpus.splits
    results, _ = check_inputs(str(config), [], str(split["train"].data_list), str(tmp_path / "dev.list"))
    lines = [r.line() for r in results if r.failed]
    assert lines == [
        f"FAIL files: --cv_data {tmp_path}/dev.list: file not found -> {PREPARE_FIX}",
        "FAIL files: tokenizer_conf.symbol_table_path is not set (the units.txt of tools/make_units.py) -> set it "
        "in the config (or --override KEY=PATH)",
        "FAIL config: keep_global_batch: true needs reference_world_size (the number of ranks the config was tuned "
        "on, e.g. 4)"]


def test_an_empty_list_and_a_file_as_model_dir_are_unusable_paths(tiny_experiment, tmp_path):
    """Preflight's kind for both; the doctor shows an empty list once, as a ``files`` FAIL."""
    config = tiny_experiment.config(tmp_path / "c.yaml")
    (tmp_path / "empty.list").write_text("\n")
    (tmp_path / "exp").write_text("")
    job = dataclasses.replace(_job(tiny_experiment, tmp_path, config), cv_data=str(tmp_path / "empty.list"))
    assert [(p.kind, p.what) for p in preflight(load_config(config), job, "gloo")] == [
        (ProblemKind.UNUSABLE_PATH, f"--cv_data {tmp_path}/empty.list: the data list is empty (no entry line)"),
        (ProblemKind.UNUSABLE_PATH, f"--model_dir {tmp_path}/exp: not a directory")]
    results, _ = check_inputs(str(config), [], str(tiny_experiment.corpus.splits["train"].data_list),
                              str(tmp_path / "empty.list"))
    assert [r.line() for r in results if r.failed] == [
        f"FAIL files: --cv_data {tmp_path}/empty.list: the data list is empty (no entry line) -> write the list "
        f"again (run.sh stage 3) or pass the right one"]


def test_a_malformed_noise_list_stops_training_in_one_line_with_status_2(tiny_experiment, tmp_path):
    """The list is read before anything is built: the trainer prints one line naming the
    key, the file and the line, and exits 2; a missing RIR list is a missing file."""
    from tests.helpers import train_here
    (tmp_path / "noise.scp").write_text("n1 /noise/a.wav\n--noise-id n2 --noise-type /noise/b.wav\n")
    config = tiny_experiment.config(tmp_path / "c.yaml", dataset_conf={
        "noise": True, "noise_conf": {"noise_scp": str(tmp_path / "noise.scp")}})
    run = train_here(tiny_experiment, tmp_path / "exp", config, check=False)
    assert run.returncode == 2
    lines = [line for line in run.stderr.splitlines() if line.startswith("error")]
    assert lines == [f"error: cannot start training: dataset_conf.noise_conf.noise_scp {tmp_path}/noise.scp "
                     f"line 2: a Kaldi RIRS_NOISES line needs '--option value' pairs followed by the path: "
                     f"'--noise-id n2 --noise-type /noise/b.wav'"], run.stderr
    config = tiny_experiment.config(tmp_path / "r.yaml", dataset_conf={
        "reverb": True, "reverb_conf": {"rir_scp": str(tmp_path / "rir_list")}})
    problems = preflight(load_config(config), _job(tiny_experiment, tmp_path, config), "gloo")
    assert [(p.kind, str(p)) for p in problems] == [
        (ProblemKind.MISSING_FILE, f"dataset_conf.reverb_conf.rir_scp {tmp_path}/rir_list: file not found")]
