"""Fine-tuning runs end to end on the tiny corpus (asrkit.bin.train): LoRA and a frozen
encoder, each stopped mid-epoch and resumed, against an uninterrupted run; what their
checkpoints hold; averaging and decoding their merged models."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import load_config
from asrkit.checkpoint.load import load_checkpoint
from asrkit.models import build_model
from asrkit.models.lora import LORA_RECORD
from asrkit.checkpoint.weights import BASE_RECORD, load_weights, resolved_state
from asrkit.text.units import read_units
from asrkit.text.vocabulary import Vocabulary
from tests.helpers import train_here as train


def _tune(tiny_experiment, base, model_dir, *flags, stop=None, resume=False):
    cfg, start = base
    extra = ["--enc_init", start, "--enc_init_mods", "cmvn.,encoder.,decoder.,ctc.",
             "--override", "max_epoch=2", "--override", "save_interval=2",
             "--override", "encoder_conf.dropout_rate=0.1", *flags]
    if stop:
        extra += ["--max_steps", stop]
    if resume:
        extra += ["--checkpoint", "auto"]
    return train(tiny_experiment, model_dir, cfg, *extra)


@pytest.mark.parametrize("flags, trained", [
    (("--use_lora", "--only_optimize_lora", "true", "--lora_rank", "2", "--lora_reinit"), "lora_"),
    (("--freeze_modules", "encoder.,cmvn."), "decoder."),
], ids=["lora", "frozen_encoder"])
def test_a_resumed_finetuning_run_ends_with_the_uninterrupted_runs_weights(tiny_experiment, base_model, tmp_path,
                                                                          flags, trained):
    full = _tune(tiny_experiment, base_model, tmp_path / "full", *flags)
    assert "a new run, initialised from" in full.stderr and "trainable parameters:" in full.stderr
    part = _tune(tiny_experiment, base_model, tmp_path / "part", *flags, stop=3)
    assert "reached max_steps=3" in part.stderr
    resumed = _tune(tiny_experiment, base_model, tmp_path / "part", *flags, resume=True)
    assert "(mid-epoch)" in resumed.stderr and "was not applied: the run continues" in resumed.stderr
    a, b = (load_checkpoint(tmp_path / d / "epoch_1.pt") for d in ("full", "part"))
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    # the checkpoint holds what training changes; the frozen rest is the base file's, by digest
    base = a[BASE_RECORD]
    assert base["path"] == str(base_model[1].resolve()) and len(base["sha256"]) == 64
    assert not set(base["tensors"]) & set(a["model"])
    assert any(k.startswith(trained) or f".{trained}" in k for k in a["model"])
    # the optimizer holds the trainable parameters only: the tensors the checkpoint stores (less
    # the frozen weights lora_reinit offset)
    offset = {f"{layer}.weight" for layer in a.get(LORA_RECORD, {}).get("scalings", {})}
    assert len(a["optimizer"]["param_groups"][0]["params"]) == len(set(a["model"]) - offset)
    stored = sum(v.numel() for v in a["model"].values())
    whole = resolved_state(a, "a", merge_lora=False)
    assert stored < 0.6 * sum(v.numel() for v in whole.values())
    # the frozen tensors did not move (BatchNorm statistics of the frozen encoder included)
    start = load_checkpoint(base_model[1])["model"]
    for k in base["tensors"]:
        assert torch.equal(whole[k], start[k]), k
    # lora_reinit offsets the adapted layers' weights: stored, not read from the base
    for layer in a.get(LORA_RECORD, {}).get("scalings", {}):
        assert f"{layer}.weight" in a["model"] and not torch.equal(whole[f"{layer}.weight"], start[f"{layer}.weight"])


def test_a_lora_model_decodes_merged_and_starts_where_its_base_is(tiny_experiment, base_model, tmp_path):
    """Merging into the base weights (loading an epoch checkpoint, averaging) gives the
    unmerged model's outputs; before the first step the adapted model is its base."""
    run = _tune(tiny_experiment, base_model, tmp_path / "lora", "--use_lora", "--lora_rank", "4",
                "--lora_alpha", "16", "--lora_modules", "encoder.encoders,decoder.decoders")
    assert "LoRA: rank 4, alpha 16 on" in run.stderr
    ckpt = load_checkpoint(tmp_path / "lora" / "epoch_1.pt")
    assert ckpt[LORA_RECORD]["scalings"] and BASE_RECORD not in ckpt  # (nothing frozen: all of it stored)
    cfg = load_config(tmp_path / "lora" / "train.yaml")
    vocabulary = Vocabulary.from_symbols(read_units(cfg.tokenizer_conf.symbol_table_path))
    plain = build_model(cfg, cfg.input_dim, vocabulary).eval()
    load_weights(plain, ckpt, "epoch_1")
    from asrkit.finetune.setup import adapt
    unmerged = build_model(cfg, cfg.input_dim, vocabulary).eval()
    adapt(unmerged, cfg)
    load_weights(unmerged, ckpt, "epoch_1")
    assert any(".lora_B" in k for k in unmerged.state_dict())
    gen = torch.Generator().manual_seed(0)
    feats, lengths = torch.randn(2, 50, cfg.input_dim, generator=gen), torch.tensor([50, 40])
    with torch.no_grad():
        (x, _), (y, _) = plain.encoder(plain.cmvn(feats), lengths), unmerged.encoder(unmerged.cmvn(feats), lengths)
    torch.testing.assert_close(x, y, rtol=0, atol=1e-5)
    from asrkit.bin.average_model import main as average
    assert average(["--model_dir", str(tmp_path / "lora"), "--dst", str(tmp_path / "avg.pt"), "--num", "2"]) == 0
    averaged = load_checkpoint(tmp_path / "avg.pt")
    assert not any("lora_" in k for k in averaged["model"]) and LORA_RECORD not in averaged
    load_weights(build_model(cfg, cfg.input_dim, vocabulary), averaged, "avg")


def test_the_old_data_mixed_in_by_weight_resumes_exactly_and_reports_each_cv_list(tiny_experiment, base_model,
                                                                                  tmp_path):
    """Two training lists weighted 0.25 / 0.75 and two CV lists: the log gives each list's
    share and each CV list's loss; stopped mid-epoch and resumed, the weights are the
    uninterrupted run's."""
    split = tiny_experiment.corpus.splits
    lists = dict(train_list=[f"{split['train'].data_list}:0.25", f"{split['test'].data_list}:0.75"],
                 cv_list=[split["dev"].data_list, split["test"].data_list])
    cfg, start = base_model
    flags = ["--enc_init", start, "--enc_init_mods", "cmvn.,encoder.,decoder.,ctc.", "--override", "max_epoch=2",
             "--override", "save_interval=2", "--freeze_modules", "encoder."]
    full = train(tiny_experiment, tmp_path / "full", cfg, *flags, **lists)
    assert "weight 0.25: 15 per epoch" in full.stderr and "weight 0.75: 45 per epoch" in full.stderr
    assert f"[{split['dev'].data_list}]" in full.stderr and "(all CV lists)" in full.stderr
    train(tiny_experiment, tmp_path / "part", cfg, *flags, "--max_steps", "3", **lists)
    resumed = train(tiny_experiment, tmp_path / "part", cfg, *flags, "--checkpoint", "auto", **lists)
    assert "(mid-epoch)" in resumed.stderr
    a, b = (load_checkpoint(tmp_path / d / "epoch_1.pt")["model"] for d in ("full", "part"))
    for k in a:
        assert torch.equal(a[k], b[k]), k
