"""The export tools refuse a destination they cannot write at the start, in one line with
status 2 naming the option, the path and the reason -- before the config is even read (the
paths of the model here do not exist: a later check would name them instead).  Root writes
through permission bits, so the unwritable places are ones no user can write: a folder under
a regular file (ENOTDIR) and one under ``/proc``."""
from __future__ import annotations

import pytest

from asrkit.bin import export, export_onnx

MODEL = ["--config", "no/such/train.yaml", "--checkpoint", "no/such/avg.pt"]


@pytest.fixture()
def regular_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("not a folder\n")
    return path


def refusal(caplog, main, option: str, path: str) -> str:
    assert main([*MODEL, option, path]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "\n" not in errors[0]
    assert errors[0].startswith(f"{option} {path}: cannot be written: ")
    return errors[0]


@pytest.mark.parametrize("main,option,name", [(export_onnx.main, "--output_dir", "onnx"),
                                              (export.main, "--output", "final.zip")],
                         ids=["export_onnx", "export"])
def test_a_destination_under_a_regular_file_is_refused_first(caplog, regular_file, main, option, name):
    """``export_onnx`` covers the transducer export too: it checks before it reads the
    config that says which kind of model it is."""
    line = refusal(caplog, main, option, str(regular_file / "sub" / name))
    assert line.endswith(f"Not a directory ({regular_file})")
    assert regular_file.read_text() == "not a folder\n"


def test_a_destination_under_proc_is_refused_first(caplog):
    refusal(caplog, export_onnx.main, "--output_dir", "/proc/asrkit-export-test/onnx")


def test_an_archive_path_that_is_a_folder_is_refused_first(caplog, tmp_path):
    assert refusal(caplog, export.main, "--output", str(tmp_path)).endswith("Is a directory")
