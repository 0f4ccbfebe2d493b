"""A LoRA fine-tuning of a trained digits model (``tests/fixtures/asrkit_digits/u2pp_runtime``)
on the tiny espeak-ng corpus, merged, exported to ONNX and decoded by the real sherpa-onnx
runtime: the same text as asrkit's eager greedy search of the LoRA checkpoint."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import load_config
from asrkit.trained_model import build_trained_model
from asrkit.export.onnx import OFFLINE_FILE, export_onnx
from asrkit.export.sherpa import decode_offline, offline_recognizer
from asrkit.config_files import load_text_inputs
from asrkit.checkpoint.load import load_checkpoint
from asrkit.models.lora import LORA_RECORD
from asrkit.checkpoint.weights import BASE_RECORD
from tests.export.test_sherpa_runtime import MAX_DITHER_FLIPS, MODEL, features, greedy, utterances  # noqa: F401
from tests.helpers import train_here as train

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_merged_lora_model_decodes_in_sherpa_onnx_as_in_asrkit(tiny_experiment, utterances, tmp_path):
    paths = [f"cmvn_conf.cmvn_file={MODEL / 'global_cmvn'}",
             f"tokenizer_conf.symbol_table_path={MODEL / 'units.txt'}"]
    run = train(tiny_experiment, tmp_path / "lora", MODEL / "train.yaml",
                "--enc_init", MODEL / "avg_3.pt", "--enc_init_mods", "cmvn.,encoder.,decoder.,ctc.",
                "--use_lora", "true", "--only_optimize_lora", "true", "--lora_rank", "4", "--lora_alpha", "8",
                "--max_steps", "3", *[a for p in paths for a in ("--override", p)],
                "--override", "dataset_conf.num_workers=0", "--override", "optim_conf.lr=0.02",
                "--override", "scheduler_conf.warmup_steps=1")
    assert "reached max_steps=3" in run.stderr
    step = tmp_path / "lora" / "step_3.pt"
    saved = load_checkpoint(step)
    assert saved[LORA_RECORD] and saved[BASE_RECORD]["tensors"]
    assert all(".lora_" in k for k in saved["model"])  # the adapters alone are stored
    cfg = load_config(tmp_path / "lora" / "train.yaml", paths)
    tokenizer = load_text_inputs(cfg, model_cmvn=False)
    units = list(tokenizer.symbols)
    model = build_trained_model(cfg, step, tokenizer.vocabulary, "cpu")  # merged into the base weights
    base = build_trained_model(cfg, MODEL / "avg_3.pt", tokenizer.vocabulary, "cpu")
    moved = max(float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), base.state_dict().values()))
    assert moved > 1e-3  # (the adapters changed the model)
    fb = cfg.dataset_conf.fbank_conf
    out = tmp_path / "onnx"
    export_onnx(model, units, out, sample_rate=16000, int8=False, num_mel_bins=fb.num_mel_bins,
                snip_edges=fb.snip_edges, high_freq=fb.high_freq)
    recognizer = offline_recognizer(out, model=OFFLINE_FILE)
    differ = []
    for key, samples, _ in utterances[::2]:
        feats = features(samples, fb)
        with torch.no_grad():
            enc, _ = model.encoder(model.cmvn(feats.unsqueeze(0)), torch.tensor([feats.size(0)]))
            want, _ = greedy(model.ctc(enc), units)
        if decode_offline(recognizer, samples, 16000).text.strip() != want:
            differ.append(key)
    assert len(differ) <= MAX_DITHER_FLIPS, differ  # (sherpa-onnx dithers: tests/export/test_sherpa_runtime.py)
