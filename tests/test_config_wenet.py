"""WeNet's keys that are not schema fields (``WENET_KEYS``, ``asrkit.schema.WenetKey``): the
``train.yaml`` WeNet's trainer saves loads with the trainer's keys in their WeNet meaning,
and every note and refusal says what is true (asrkit's only behaviour, a WeNet feature
switched off, a value WeNet itself takes no meaning from, or a second name of a field).

The fixtures ``tests/fixtures/wenet/{offline,u2pp}/train.yaml`` are the files WeNet saved
for the reference models of ``/work/shared/wenet_reference`` (see its README)."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from asrkit.config import TrainConfig, load_config, schema_classes

from asrkit.schema import build, check_all
from asrkit.schema import WenetKey
from tests.helpers import REPO

WENET = REPO / "tests" / "fixtures" / "wenet"


def notes_of(raw: dict) -> list[str]:
    notes: list[str] = []
    build(TrainConfig, raw, notes=notes)
    return notes


# ----------------------------------------------------------------------------- WeNet's train.yaml


def test_wenet_saved_train_yaml_loads_with_the_trainer_keys():
    notes: list[str] = []
    cfg = load_config(WENET / "offline" / "train.yaml", notes=notes)
    units = (WENET / "offline" / "units.txt").read_text(encoding="utf-8").splitlines()
    assert cfg.output_dim == len(units) == 19 and cfg.input_dim == 80 and cfg.dtype == "fp32"
    noted = {n.split(":")[0] for n in notes}
    assert {"model_dir", "save_states", "use_amp", "vocab_size"} <= noted
    assert "vocab_size: 19 (WeNet's trainer writes the dictionary size as both)" in notes
    assert cfg.train_engine == "torch_ddp"  # (a field: asrkit's engines are WeNet's torch_ddp and torch_fsdp)


def test_u2pp_train_yaml_loads_with_its_streaming_keys():
    """The U2++ train.yaml loads with nothing refused: dynamic-chunk training, causal
    convolution and layer_norm conv modules are things asrkit has."""
    raw = yaml.safe_load((WENET / "u2pp" / "train.yaml").read_text(encoding="utf-8"))
    assert check_all(TrainConfig, raw) == []
    conf = load_config(WENET / "u2pp" / "train.yaml").encoder_conf
    assert conf.use_dynamic_chunk and not conf.use_dynamic_left_chunk and conf.static_chunk_size == 0


# ----------------------------------------------------------------------------- the trainer's keys


def test_vocab_size_is_output_dim():
    assert build(TrainConfig, {"vocab_size": 30}).output_dim == 30  # alone: it is the output_dim
    assert build(TrainConfig, {"vocab_size": 30, "output_dim": 30}).output_dim == 30
    assert check_all(TrainConfig, {"vocab_size": 31, "output_dim": 30}) == [
        "vocab_size: 31 but output_dim is 30; they must be equal "
        "(WeNet's trainer writes the dictionary size as both)"]
    assert check_all(TrainConfig, {"vocab_size": 2}) == ["vocab_size: must be > 2, got 2"]
    assert check_all(TrainConfig, {"vocab_size": "19"}) == ["vocab_size: expected int, got '19' (str)"]


@pytest.mark.parametrize("raw, wrong", [
    ({"use_amp": True, "dtype": "fp16"}, None),
    ({"use_amp": False, "dtype": "fp32"}, None),
    ({"use_amp": False}, None),
    ({"train_engine": "torch_ddp"}, None),
    ({"dtype": "bf16"}, None),  # no WeNet trainer key: asrkit's dtype
    ({"use_amp": True}, "use_amp"),  # WeNet: fp16; asrkit's default dtype: fp32
    ({"use_amp": False, "dtype": "bf16"}, "use_amp"),  # WeNet's torch_ddp trains this in fp32
    ({"train_engine": "torch_ddp", "dtype": "fp16"}, None),  # asrkit's train_engine: dtype says the precision
    ({"train_engine": "torch_ddp", "use_amp": False, "dtype": "fp16"}, "use_amp"),
])
def test_wenet_precision_keys_agree_with_dtype(raw, wrong):
    errors = check_all(TrainConfig, raw)
    if wrong is None:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith(f"{wrong}: WeNet trains this config in"), errors


def test_trainer_keys_outside_their_wenet_meaning_are_refused():
    errors = check_all(TrainConfig, {"train_engine": "deepspeed", "save_states": "everything",
                                     "model_dir": 3, "init_infos": [1]})
    assert len(errors) == 4, errors
    assert errors[0] == "train_engine: must be one of ['torch_ddp', 'torch_fsdp'], got 'deepspeed'", errors
    assert errors[1].startswith("save_states: everything is not supported by asrkit (accepted only as: "
                                "model_only, model+optimizer;")
    assert errors[2] == "model_dir: expected str, got 3 (int)"
    assert errors[3] == "init_infos: expected a mapping, got [1]"
    assert check_all(TrainConfig, {"init_infos": {"epoch": 3, "step": 300, "tag": "epoch_3"}}) == []


# ----------------------------------------------------------------------------- the words


def test_notes_say_what_is_true():
    """Item 6 of the WeNet-interoperability issue: a key at the only value asrkit has is
    logged as such, not as unsupported."""
    notes = notes_of({"ctc": "ctc", "encoder_conf": {"use_sdpa": True, "n_kv_head": None},
                      "dataset_conf": {"spec_aug_conf": {"max_w": 80}}})
    assert notes == [
        "ctc: ctc (asrkit's only CTC head)",
        "encoder_conf.use_sdpa: true (asrkit always uses scaled_dot_product_attention, "
        "the same attention as WeNet's either way)",
        "encoder_conf.n_kv_head: null (off; asrkit does not implement grouped-query attention (n_kv_head))",
        "dataset_conf.spec_aug_conf.max_w: 80 (WeNet's spec_aug takes max_w and never uses it "
        "(no time warping))",
    ]
    assert not any("ignored" in n or "not support" in n for n in notes)


def test_float_keys_accept_yaml11_strings():
    """``norm_eps: 1e-5`` is the string '1e-5' to a YAML 1.1 loader; it means WeNet's default."""
    raw = yaml.safe_load("encoder_conf:\n  norm_eps: 1e-5\n  stochastic_depth_rate: 0\n")
    assert raw["encoder_conf"]["norm_eps"] == "1e-5"
    assert check_all(TrainConfig, raw) == []
    assert check_all(TrainConfig, {"encoder_conf": {"norm_eps": 1e-6}})[0].startswith(
        "encoder_conf.norm_eps: 1.0e-06 is not supported by asrkit (accepted only as: 1.0e-05;")


def test_every_wenet_key_entry_is_complete():
    """One table per section; every entry has a kind and a reason, none shadows a field,
    and a ``same_as`` entry names a field of its own section."""
    for cls in schema_classes(TrainConfig):
        table = getattr(cls, "WENET_KEYS", {})
        fields = {f.name for f in dataclasses.fields(cls)}
        for key, entry in table.items():
            assert isinstance(entry, WenetKey), (cls.__name__, key)
            assert entry.kind in ("only", "off", "any", "same_as") and entry.reason, (cls.__name__, key)
            assert key not in fields, (cls.__name__, key)
            assert entry.values or entry.kind in ("any", "same_as"), (cls.__name__, key)
            assert entry.kind != "same_as" or entry.field in fields, (cls.__name__, key)


def test_trainer_defaults_are_wenets():
    """WeNet's configs set only ``optim_conf.lr`` and rely on torch's Adam defaults; WeNet's
    executor clips at 50 when ``grad_clip`` is absent.  The optimizer asrkit builds from
    WeNet's own train.yaml is torch's default Adam."""
    import torch

    from asrkit.train.scheduler import build_optimizer
    cfg = load_config(WENET / "offline" / "train.yaml")
    optimizer = build_optimizer(cfg, [torch.nn.Parameter(torch.zeros(2))])
    group = optimizer.param_groups[0]
    assert (tuple(group["betas"]), group["eps"], group["lr"]) == ((0.9, 0.999), 1e-8, 0.004)
    assert build(TrainConfig, {}).grad_clip == 50.0
