"""Config mechanism: validation at load, overrides, dump/reload, WeNet configs.
(No dead keys: tests/test_config_keys_read.py.)"""
from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from asrkit.config import TrainConfig, apply_overrides, dump_config, load_config, schema_classes, to_dict

from asrkit.schema import ConfigError, build, check_all

REPO = Path(__file__).resolve().parents[1]
WENET = REPO / "tests" / "fixtures" / "wenet"


def write(tmp_path, data, name="c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    return p


def test_misspelled_key_names_key_and_suggests(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, {"accum_grd": 4}))
    assert "accum_grd: unknown key; did you mean accum_grad?" in str(e.value)


def test_nested_unknown_key_has_full_path(tmp_path):
    errors = check_all(TrainConfig, {"optim_conf": {"lr": 0.1, "weight_decy": 0.0}})
    assert errors == ["optim_conf.weight_decy: unknown key; did you mean optim_conf.weight_decay?"]


def test_all_problems_reported_together():
    errors = check_all(TrainConfig, {"accum_grad": "4", "grad_clip": True, "max_epoch": 0,
                                     "optim": "sgd", "launch": {"dist_backend": "ncc"}})
    joined = "\n".join(errors)
    assert len(errors) == 5, joined
    assert "accum_grad: expected int, got '4'" in joined
    assert "grad_clip: expected float, got True" in joined
    assert "max_epoch: must be > 0" in joined
    assert "optim: must be one of ['adam', 'adamw'], got 'sgd'" in joined
    assert "launch.dist_backend" in joined and "did you mean nccl?" in joined


def test_override_changes_exactly_that_value(tmp_path):
    path = write(tmp_path, {"accum_grad": 2, "optim_conf": {"lr": 0.002}})
    before = to_dict(load_config(path))
    after = to_dict(load_config(path, ["optim_conf.lr=0.001"]))
    assert after["optim_conf"]["lr"] == 0.001
    after["optim_conf"]["lr"] = before["optim_conf"]["lr"]
    assert after == before


def test_override_parses_yaml_scalars_and_creates_sections(tmp_path):
    raw = apply_overrides({}, ["launch.dist_backend=gloo", "accum_grad=8", "optim_conf.betas=[0.9, 0.99]"])
    cfg = build(TrainConfig, raw)
    assert cfg.launch.dist_backend == "gloo" and cfg.accum_grad == 8 and cfg.optim_conf.betas == [0.9, 0.99]
    with pytest.raises(ConfigError, match="expected KEY.PATH=VALUE"):
        apply_overrides({}, ["accum_grad"])
    with pytest.raises(ConfigError, match="accum_grad is 4, not a mapping"):
        apply_overrides({"accum_grad": 4}, ["accum_grad.x=1"])


def test_override_of_unknown_key_is_caught(tmp_path):
    with pytest.raises(ConfigError, match=r"optim_conf.lrr: unknown key; did you mean optim_conf.lr\?"):
        load_config(write(tmp_path, {}), ["optim_conf.lrr=0.1"])


def test_float_accepts_yaml11_scientific_strings():
    assert build(TrainConfig, {"optim_conf": {"lr": "1e-3"}}).optim_conf.lr == pytest.approx(1e-3)


def test_wenet_key_refused_outside_its_accepted_values():
    """(The words of the notes and refusals: tests/test_config_wenet.py.)"""
    errors = check_all(TrainConfig, {"encoder_conf": {"stochastic_depth_rate": 0.1}})
    assert errors == ["encoder_conf.stochastic_depth_rate: 0.1 is not supported by asrkit "
                      "(accepted only as: 0.0; asrkit does not implement stochastic depth)"]
    notes: list[str] = []
    build(TrainConfig, {"encoder_conf": {"stochastic_depth_rate": 0.0}}, notes=notes)
    assert notes == ["encoder_conf.stochastic_depth_rate: 0.0 (off; asrkit does not implement stochastic depth)"]


def test_dump_and_reload_is_equal(tmp_path):
    cfg = load_config(write(tmp_path, {"accum_grad": 3, "optim": "adamw", "optim_conf": {"lr": 0.01}}))
    dump_config(cfg, tmp_path / "train.yaml")
    assert load_config(tmp_path / "train.yaml") == cfg
    full = TrainConfig()
    dump_config(full, tmp_path / "default.yaml")
    assert load_config(tmp_path / "default.yaml") == full


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(bad)


# ----------------------------------------------------------------------------- WeNet configs

# Keys these WeNet configs set to values asrkit does not support: loading must report
# exactly these (clearly, as unsupported) and nothing else.
WENET_EXPECTED_UNSUPPORTED = {
    "aishell_train_conformer.yaml": set(),
    "librispeech_train_conformer.yaml": set(),
    "aishell_train_u2++_conformer.yaml": set(),
}


@pytest.mark.parametrize("name", sorted(WENET_EXPECTED_UNSUPPORTED))
def test_wenet_configs_load(name):
    raw = yaml.safe_load((WENET / name).read_text())
    errors = check_all(TrainConfig, raw)
    unsupported = {e.split(":")[0] for e in errors if "is not supported by asrkit" in e}
    other = [e for e in errors if "is not supported by asrkit" not in e]
    assert not other, f"{name}: asrkit cannot yet read:\n  " + "\n  ".join(other)
    assert unsupported == WENET_EXPECTED_UNSUPPORTED[name]


def test_wenet_u2pp_config_builds_wenets_parameter_count():
    """WeNet's own code builds 48,347,803 parameters from its AISHELL U2++ conformer config with
    4233 units (causal convolution of kernel 8 with layer norm; bidirectional decoder 3 + 3)."""
    from asrkit.models import build_model, count_parameters
    from asrkit.text.vocabulary import Vocabulary
    raw = yaml.safe_load((WENET / "aishell_train_u2++_conformer.yaml").read_text())
    cfg = build(TrainConfig, {k: raw[k] for k in ("encoder", "encoder_conf", "decoder", "decoder_conf", "model_conf")})
    assert cfg.encoder_conf.use_dynamic_chunk and cfg.encoder_conf.causal
    assert count_parameters(build_model(cfg, 80, Vocabulary.of_size(4233))) == 48_347_803


# ----------------------------------------------------------------------------- schema
# (every schema key is read by code: tests/test_config_keys_read.py observes it at run time)


def test_schema_types_are_supported():
    for cls in schema_classes(TrainConfig):
        for name, tp in typing.get_type_hints(cls).items():
            if name == "WENET_KEYS":
                continue
            cls()  # every section must be constructible from defaults


def test_import_prints_no_warnings():
    code = "import asrkit, asrkit.config\nimport pkgutil, importlib\n" \
           "for m in pkgutil.walk_packages(asrkit.__path__, 'asrkit.'):\n" \
           "    importlib.import_module(m.name)\n"
    proc = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == ""


def test_an_override_that_fails_validation_is_named_not_only_the_file(tmp_path):
    """The mistake is on the command line: the error leads with the ``--override`` that set
    the key (or a key under it); a problem of the file alone keeps its plain message."""
    path = write(tmp_path, {"optim_conf": {"lr": 0.002}})
    with pytest.raises(ConfigError) as e:
        load_config(path, ["optim_conf.lr=0.1", "encoder_conf.num_blocks=abc"])
    assert str(e.value).startswith(f"invalid {path} with its overrides: --override encoder_conf.num_blocks=abc: "
                                   "encoder_conf.num_blocks: expected int")
    with pytest.raises(ConfigError, match=r"--override encoder_conf.nope.deeper=3: encoder_conf.nope: unknown key"):
        load_config(path, ["encoder_conf.nope.deeper=3"])
    path = write(tmp_path, {"max_epoch": "x"})
    with pytest.raises(ConfigError) as e:
        load_config(path, ["optim_conf.lr=0.1"])
    assert str(e.value).startswith(f"invalid {path}: max_epoch:")
