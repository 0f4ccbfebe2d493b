"""Every config and checkpoint a user hands a command-line tool, when malformed, ends that
tool with one error line and exit status 2 -- never a traceback (a raised exception fails
these tests).  Data lists: tests/bin/test_train.py and tests/data/test_lists.py; units, BPE
and CMVN files: tests/reliability/test_malformed_text_inputs.py."""
from __future__ import annotations

import pickle

import pytest
import torch

from asrkit.config import load_config
from asrkit.models import build_model
from asrkit.text.units import read_units
from asrkit.text.vocabulary import Vocabulary
from tests.reliability.common import error_lines, run_main

CONFIGS = {
    "YAML syntax": b"model: [unclosed\n  encoder: : :\n",
    "binary": b"\xff\xfe\x00\x01binary",
    "not a mapping": b"- accum_grad\n- 4\n",
    "unknown key": b"acum_grad: 4\n",
}


class Payload:
    """A pickled object that is not a tensor (what weights_only loading must refuse)."""


def checkpoints(root, good) -> dict:
    """Malformed checkpoints, by kind, next to ``good`` (a real one)."""
    data = good.read_bytes()
    cases = {"random bytes": torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(1),
                                           dtype=torch.uint8).numpy().tobytes(),
             "truncated": data[: len(data) // 2], "empty": b""}
    paths = {}
    for kind, blob in cases.items():
        paths[kind] = root / f"{kind.replace(' ', '_')}.pt"
        paths[kind].write_bytes(blob)
    paths["pickled object"] = root / "payload.pt"
    torch.save({"model": Payload()}, paths["pickled object"], pickle_module=pickle)
    paths["another model"] = root / "other.pt"
    cfg = load_config(root / "wide.yaml")
    torch.save({"model": build_model(cfg, 40, Vocabulary.from_symbols(read_units(cfg.tokenizer_conf.symbol_table_path)))
                .state_dict()}, paths["another model"])
    return paths


@pytest.fixture(scope="module")
def inputs(tiny_experiment, tmp_path_factory):
    root = tmp_path_factory.mktemp("malformed")
    config = tiny_experiment.config(root / "train.yaml")
    tiny_experiment.config(root / "wide.yaml", encoder_conf={"output_size": 48})
    cfg = load_config(config)
    good = root / "good.pt"
    torch.save({"model": build_model(cfg, 40, Vocabulary.from_symbols(read_units(cfg.tokenizer_conf.symbol_table_path)))
                .state_dict()}, good)
    configs = {}
    for kind, blob in CONFIGS.items():
        configs[kind] = root / f"{kind.replace(' ', '_')}.yaml"
        configs[kind].write_bytes(blob)
    return {"root": root, "config": config, "configs": configs, "checkpoints": checkpoints(root, good),
            "data": tiny_experiment.corpus.splits["dev"].data_list,
            "train": tiny_experiment.corpus.splits["train"].data_list}


@pytest.mark.parametrize("tool", ["train", "recognize", "export"])
@pytest.mark.parametrize("kind", list(CONFIGS))
def test_a_malformed_config_is_one_line_and_status_2(inputs, tool, kind, tmp_path, capsys, caplog):
    path = inputs["configs"][kind]
    code = run_main(tool, inputs, tmp_path, config=path, checkpoint=inputs["checkpoints"]["truncated"])
    lines = error_lines(capsys, caplog)
    assert code == 2 and len(lines) == 1 and "\n" not in lines[0] and str(path) in lines[0], lines
    assert not (tmp_path / "exp").exists() and not (tmp_path / "final.zip").exists()


@pytest.mark.parametrize("tool", ["train", "recognize", "export", "average_model"])
@pytest.mark.parametrize("kind", ["random bytes", "truncated", "empty", "pickled object", "another model"])
def test_a_malformed_checkpoint_is_one_line_and_status_2(inputs, tool, kind, tmp_path, capsys, caplog):
    path = inputs["checkpoints"][kind]
    if tool == "average_model":
        (tmp_path / "ckpts").mkdir()
        for n in (0, 1):
            (tmp_path / "ckpts" / f"epoch_{n}.pt").write_bytes(path.read_bytes())
        path = tmp_path / "ckpts"  # (the first it reads is named)
    code = run_main(tool, inputs, tmp_path, checkpoint=path)
    lines = error_lines(capsys, caplog)
    if tool == "average_model" and kind == "another model":
        assert code == 0  # two copies of a well-formed model average fine: nothing is malformed
        return
    assert code == 2 and len(lines) == 1 and "\n" not in lines[0], lines
    assert str(path) in lines[0], lines
    expected = {"pickled object": ["refused: it carries pickled objects"],
                # (train starts from a bare model's weights: another model's do not fit)
                "another model": ["does not match"]}.get(kind, ["truncated or corrupted"])
    assert any(e in lines[0] for e in expected), lines
    assert not (tmp_path / "final.zip").exists() and not (tmp_path / "avg.pt").exists()
