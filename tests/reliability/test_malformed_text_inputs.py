"""Every units, BPE, non-linguistic symbols and CMVN problem ends train, recognize and
export with one error line naming the file and exit status 2 -- never a traceback (a
raised exception fails these tests) -- before the model is built: train leaves no
experiment directory behind, and recognize/export are handed a truncated checkpoint, whose
own error would come first if the model were built and loaded before the files were
checked."""
from __future__ import annotations

import json

import pytest

from tests.reliability.common import error_lines, run_main

TOOLS = ["train", "recognize", "export"]
WENET_SPECIAL = {"<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}


def units_text(tiny_experiment) -> list[str]:
    return tiny_experiment.units.read_text(encoding="utf-8").splitlines()  # asrkit layout


def units_cases(exp, root) -> dict:
    """name -> (config keys, the file the message must name, what it must say)."""
    lines = units_text(exp)
    body = [line.split()[0] for line in lines[2:-1]]

    def write(name: str, content: str | bytes):
        path = root / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return path

    dup = write("dup.txt", "\n".join(lines[:3] + [f"{body[0]} 3"] + [f"{s} {i + 4}" for i, s in enumerate(body[2:])]
                                     + [f"<sos/eos> {len(body) + 2}"]) + "\n")
    gap = write("gap.txt", "\n".join(lines[:2] + [f"{s} {i + 3}" for i, s in enumerate(body)]
                                     + [f"<sos/eos> {len(body) + 3}"]) + "\n")
    no_eos = write("no_eos.txt", "\n".join(lines[:-1]) + "\n")
    bad_line = write("bad_line.txt", "\n".join(lines[:2] + [body[0]] + lines[3:]) + "\n")
    binary = write("binary.txt", b"\xff\xfe<blank> 0\n")
    blank_1 = write("blank_1.txt", "\n".join(["<unk> 0", "<blank> 1"] + lines[2:]) + "\n")
    missing = root / "nope" / "units.txt"
    unit = lambda path, **conf: {"tokenizer_conf": {"symbol_table_path": str(path), **conf}}  # noqa: E731
    return {
        "missing units file": (unit(missing), missing, "not found"),
        "duplicate unit": (unit(dup), dup, f"dup.txt:4: duplicate symbol '{body[0]}' (already id 2)"),
        "non-contiguous ids": (unit(gap), gap, "gap.txt:3: id 3 out of order: ids must be 0..N-1 in order"),
        "line without an id": (unit(bad_line), bad_line, "bad_line.txt:3: expected '<symbol> <id>'"),
        "not UTF-8": (unit(binary), binary, "cannot read the units file"),
        "no <sos/eos>": (unit(no_eos), no_eos, "no <sos/eos> unit"),
        "<blank> at 1, ctc_blank_id 0": (unit(blank_1), blank_1,
                                         "ctc_conf.ctc_blank_id is 0 but %s has <blank> at id 1" % blank_1),
        "special_tokens disagree": (unit(exp.units, special_tokens=WENET_SPECIAL), exp.units,
                                    f"special_tokens says <sos> is id 2, but {exp.units} has '{body[0]}' at id 2"),
    }


def bpe_cases(exp, root) -> dict:
    garbage, empty, missing = root / "garbage.model", root / "empty.model", root / "nope" / "bpe.model"
    garbage.write_bytes(b"\x00\x01 not a sentencepiece model \xff" * 8)
    empty.write_bytes(b"")
    bpe = lambda path: {"tokenizer": "bpe", "tokenizer_conf": {"symbol_table_path": str(exp.units),  # noqa: E731
                                                               "bpe_path": str(path)}}
    return {"missing BPE model": (bpe(missing), missing, "not found"),
            "corrupt BPE model": (bpe(garbage), garbage, "not a readable sentencepiece model"),
            "empty BPE model": (bpe(empty), empty, "not a readable sentencepiece model")}


def non_lang_syms_cases(exp, root) -> dict:
    bad, missing = root / "bad_syms.txt", root / "nope" / "syms.txt"
    bad.write_text("<NOISE>\nLAUGHTER\n", encoding="utf-8")
    syms = lambda path: {"tokenizer_conf": {"symbol_table_path": str(exp.units),  # noqa: E731
                                            "non_lang_syms_path": str(path)}}
    return {"missing non-linguistic symbols": (syms(missing), missing, "not found"),
            "malformed non-linguistic symbols": (syms(bad), bad, "bad_syms.txt:2: 'LAUGHTER' is not a "
                                                                 "non-linguistic symbol")}


def cmvn_files(root) -> dict:
    """name -> (path, what the message must say) for the malformed CMVN files."""
    files = {"not JSON": ("{mean_stat: [1, 2", "not a CMVN JSON file"),
             "wrong keys": (json.dumps({"mean": [0.0] * 40, "var": [1.0] * 40, "frame_num": 10}), "no 'mean_stat' key"),
             "wrong dimension": (json.dumps({"mean_stat": [0.0] * 80, "var_stat": [1.0] * 80, "frame_num": 10}),
                                 "CMVN statistics of dimension 80, the features have 40"),
             "frame_num 0": (json.dumps({"mean_stat": [0.0] * 40, "var_stat": [1.0] * 40, "frame_num": 0}),
                             "frame_num > 0")}
    out = {"missing": (root / "nope" / "global_cmvn", "not found")}
    for name, (content, message) in files.items():
        path = root / f"cmvn_{name.replace(' ', '_')}.json"
        path.write_text(content, encoding="utf-8")
        out[name] = (path, message)
    return out


@pytest.fixture(scope="module")
def cases(inputs, tiny_experiment):
    root = inputs["root"] / "text_inputs"
    root.mkdir()
    out = {**units_cases(tiny_experiment, root), **bpe_cases(tiny_experiment, root),
           **non_lang_syms_cases(tiny_experiment, root)}
    for name, (path, message) in cmvn_files(root).items():
        # the model's CMVN layer: read by train (decoding and export take it from the checkpoint)
        out[f"CMVN layer: {name}"] = ({"cmvn": "global_cmvn", "cmvn_conf": {"cmvn_file": str(path)}}, path, message)
        # the data pipeline's CMVN: read by every tool
        out[f"data CMVN: {name}"] = ({"cmvn": None, "dataset_conf": {"cmvn_file": str(path)}}, path, message)
    twice = tiny_experiment.cmvn  # a good file, configured as the model layer and in the data pipeline
    out["CMVN configured twice"] = ({"dataset_conf": {"cmvn_file": str(twice)}}, twice, "CMVN is configured twice")
    return out


@pytest.fixture(scope="module")
def inputs(tiny_experiment, tmp_path_factory):
    root = tmp_path_factory.mktemp("malformed_text")
    truncated = root / "truncated.pt"
    truncated.write_bytes(b"PK\x03\x04 truncated")
    return {"root": root, "truncated": truncated, "data": tiny_experiment.corpus.splits["dev"].data_list,
            "train": tiny_experiment.corpus.splits["train"].data_list}


NAMES = (["missing units file", "duplicate unit", "non-contiguous ids", "line without an id", "not UTF-8",
          "no <sos/eos>", "<blank> at 1, ctc_blank_id 0", "special_tokens disagree",
          "missing BPE model", "corrupt BPE model", "empty BPE model",
          "missing non-linguistic symbols", "malformed non-linguistic symbols", "CMVN configured twice"]
         + [f"{where}: {name}" for where in ("CMVN layer", "data CMVN")
            for name in ("missing", "not JSON", "wrong keys", "wrong dimension", "frame_num 0")])


# (the CMVN layer's file is read by train only: recognize and export take its statistics
# from the checkpoint, and an experiment folder whose CMVN file moved still decodes)
CASES = [(name, tool) for name in NAMES for tool in TOOLS if tool == "train" or not name.startswith("CMVN layer")]


@pytest.mark.parametrize("name, tool", CASES)
def test_a_bad_units_bpe_or_cmvn_file_is_one_line_and_status_2(cases, inputs, tiny_experiment, tool, name,
                                                                tmp_path, capsys, caplog):
    top, path, message = cases[name]
    config = tiny_experiment.config(tmp_path / "train.yaml", **top)
    code = run_main(tool, {**inputs, "config": config}, tmp_path, checkpoint=inputs["truncated"] if tool != "train"
                    else None)
    lines = error_lines(capsys, caplog)
    assert code == 2 and len(lines) == 1 and "\n" not in lines[0], (code, lines)
    assert str(path) in lines[0] and message in lines[0], lines
    assert not (tmp_path / "exp").exists() and not (tmp_path / "final.zip").exists()
    assert not (tmp_path / "decode").exists()
