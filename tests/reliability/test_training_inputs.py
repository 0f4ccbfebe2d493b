"""Issue 35, training inputs: an empty train or CV list and a ``--model_dir`` that is a file
are one line and exit status 2 before ``<model_dir>/log`` exists; a run whose every train
sample is bad fails (exit 2, "no utterance could be used") on every rank and leaves no
checkpoint."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from asrkit.bin.train import main
from tests.helpers import fork_ranks, train_args

pytestmark = pytest.mark.usefixtures("restore_threads")


def _train(argv: list[str]) -> tuple[int, list[str]]:
    """``asrkit.bin.train.main(argv)`` in this process: its status and its error lines."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    assert "Traceback" not in err.getvalue(), err.getvalue()[-3000:]
    return code, [line for line in err.getvalue().splitlines() if "error" in line.lower()]


@pytest.mark.parametrize("flag", ["--train_data", "--cv_data"])
def test_an_empty_list_is_one_line_before_anything_is_made(tiny_experiment, tmp_path, flag):
    empty = tmp_path / "empty.list"
    empty.write_text("\n  \n")
    lists = {"train_list" if flag == "--train_data" else "cv_list": empty}
    code, lines = _train(train_args(tiny_experiment, tmp_path / "exp", tiny_experiment.config(tmp_path / "c.yaml"),
                                    **lists))
    assert (code, lines) == (2, [f"error: cannot start training: {flag} {empty}: the data list is empty (no entry "
                                 f"line) -- write the list again (run.sh stage 3) or pass the right one"])
    assert not (tmp_path / "exp").exists()


def test_a_model_dir_that_is_a_file_is_one_line(tiny_experiment, tmp_path):
    (tmp_path / "exp").write_text("not a folder")
    nested = (tmp_path / "exp" / "sub", f" (its parent {tmp_path}/exp is a file)")
    for model_dir, where in ((tmp_path / "exp", ""), nested):
        code, lines = _train(train_args(tiny_experiment, model_dir, tiny_experiment.config(tmp_path / "c.yaml")))
        assert (code, lines) == (2, [f"error: cannot start training: --model_dir {model_dir}: not a directory{where} "
                                     f"-- pass a directory (it is created when missing)"])


def _all_bad_list(corpus, root):
    """Eight training utterances, each with its audio file missing."""
    rows = [json.loads(line) for line in corpus.splits["train"].data_list.read_text().splitlines()[:8]]
    path = root / "bad.list"
    path.write_text("".join(json.dumps(dict(r, wav=str(root / f"gone{i}.wav"), duration=1.0)) + "\n"
                            for i, r in enumerate(rows)))
    return path, len(rows)


@pytest.mark.slow  # (two ranks: two interpreters importing torch, ~10 s on an idle machine)
def test_a_run_whose_every_sample_is_bad_fails_on_every_rank(tiny_experiment, tmp_path):
    data_list, n = _all_bad_list(tiny_experiment.corpus, tmp_path)
    config = tiny_experiment.config(tmp_path / "c.yaml", save_interval=1, cv_interval=1,
                                    dataset_conf={"batch_conf": {"batch_size": 2}})
    model_dir = tmp_path / "exp"
    argv = train_args(tiny_experiment, model_dir, config, train_list=data_list)
    results = fork_ranks([argv, argv])
    assert [code for code, _, _ in results] == [2, 2], results[0][2][-3000:] + results[1][2][-3000:]
    expected = (f"training stopped: epoch 0: no utterance could be used: {n} skipped ({n} missing_file) over 2 "
                f"rank(s)")
    for _, _, err in results:
        assert expected in err and "Traceback" not in err, err[-3000:]
    assert not list(model_dir.glob("*.pt")), sorted(p.name for p in model_dir.iterdir())
