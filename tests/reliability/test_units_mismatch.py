"""A units file that does not fit the model a checkpoint holds is refused with one line
naming it and exit status 2, by recognize, export, transcribe and a resumed training run:
one unit short (the sizes named) or the same size with two units swapped (the checkpoint's
recorded SHA-256 of its units file differs: the model was trained with other units)."""
from __future__ import annotations

import json
import shutil

import pytest

from asrkit.bin import cli
from asrkit.export.archive import EXTRA_META, load_exported
from asrkit.config_files import INPUT_DIGESTS
from asrkit.files import file_digest
from asrkit import checkpoint as ckpt
from tests.helpers import train_here
from tests.reliability.common import error_lines, run_main

pytestmark = pytest.mark.usefixtures("restore_threads")  # (the tools set --num_threads)


@pytest.fixture(scope="module")
def trained(tiny_experiment, tmp_path_factory):
    """Two optimizer steps of the tiny run (step_2.pt), and its units file edited two ways."""
    root = tmp_path_factory.mktemp("units_mismatch")
    config = tiny_experiment.config(root / "c.yaml", save_interval=2)
    model_dir = root / "exp"
    train_here(tiny_experiment, model_dir, config, "--max_steps", 2)
    lines = tiny_experiment.units.read_text(encoding="utf-8").splitlines()
    short = root / "short_units.txt"
    kept = lines[:2] + lines[3:]  # one ordinary unit dropped, the ids renumbered
    short.write_text("".join(f"{line.split()[0]} {i}\n" for i, line in enumerate(kept)), encoding="utf-8")
    (a, i), (b, j) = (line.split() for line in lines[2:4])  # two ordinary units, ids swapped
    swapped = root / "swapped_units.txt"
    swapped.write_text("\n".join(lines[:2] + [f"{b} {i}", f"{a} {j}"] + lines[4:]) + "\n", encoding="utf-8")
    return {"config": config, "model_dir": model_dir, "checkpoint": model_dir / "step_2.pt", "short": short,
            "swapped": swapped, "units": tiny_experiment.units, "size": len(lines),
            "train": tiny_experiment.corpus.splits["train"].data_list,
            "data": tiny_experiment.corpus.splits["dev"].data_list}


def with_units(trained, tmp_path, units, config=None):
    """The run's ``train.yaml`` (the resolved config, with ``output_dim``; or ``config``)
    with ``units`` as its units file."""
    text = (config or trained["model_dir"] / "train.yaml").read_text(encoding="utf-8")
    text = text.replace(str(trained["units"]), str(units))
    path = tmp_path / "units.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_checkpoint_records_the_sha256_of_its_units_file(trained):
    state = ckpt.load_checkpoint(trained["checkpoint"])
    assert state[INPUT_DIGESTS] == {"units": file_digest(trained["units"])}


@pytest.mark.parametrize("tool", ["recognize", "export"])
def test_a_units_file_one_unit_short_names_the_file_and_the_sizes(trained, tool, tmp_path, capsys, caplog):
    config = with_units(trained, tmp_path, trained["short"])
    code = run_main(tool, trained, tmp_path, config=config, checkpoint=trained["checkpoint"])
    lines = error_lines(capsys, caplog)
    assert code == 2 and len(lines) == 1, lines
    assert (f"units file {trained['short']} has {trained['size'] - 1} units but the model has "
            f"{trained['size']} outputs") in lines[0]


@pytest.mark.parametrize("tool", ["recognize", "export"])
def test_swapped_units_are_refused_the_model_was_trained_with_other_units(trained, tool, tmp_path, capsys,
                                                                          caplog):
    config = with_units(trained, tmp_path, trained["swapped"])
    code = run_main(tool, trained, tmp_path, config=config, checkpoint=trained["checkpoint"])
    lines = error_lines(capsys, caplog)
    assert code == 2 and len(lines) == 1, lines
    assert f"units file {trained['swapped']} differs from the one checkpoint" in lines[0]
    assert "the model was trained with other units" in lines[0]


def test_transcribe_refuses_swapped_units(trained, capsys):
    wav = json.loads(trained["data"].read_text(encoding="utf-8").splitlines()[0])["wav"]
    code = cli.main(["transcribe", "--model", str(trained["model_dir"]), "--checkpoint", "step_2.pt",
                     "--override", f"tokenizer_conf.symbol_table_path={trained['swapped']}",
                     wav])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert "the model was trained with other units" in err


def test_resuming_with_swapped_units_is_refused(trained, tiny_experiment, tmp_path):
    model_dir = tmp_path / "exp"
    shutil.copytree(trained["model_dir"], model_dir)
    proc = train_here(tiny_experiment, model_dir, with_units(trained, tmp_path, trained["swapped"], trained["config"]),
                      "--checkpoint", "auto", "--max_steps", 4, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"cannot resume: units file {trained['swapped']} differs" in proc.stderr
    assert not (model_dir / "step_4.pt").exists()


def test_an_exported_archive_records_the_units_digest(trained, tmp_path):
    assert run_main("export", trained, tmp_path, config=trained["model_dir"] / "train.yaml",
                    checkpoint=trained["checkpoint"]) == 0
    _, extra = load_exported(tmp_path / "final.zip")
    assert json.loads(extra[EXTRA_META])[INPUT_DIGESTS] == {"units": file_digest(trained["units"])}
