"""Fine-tuning ``model: whisper`` with asrkit's training (``asrkit.bin.train``): a converted
OpenAI-layout file (random weights; ``--init_ctc``: the CTC head from the decoder's
embedding, WeNet's ``init-ctc``) is the starting point of a run on the tiny corpus; stopped
mid-epoch and resumed with ``--checkpoint auto`` it ends with the uninterrupted run's weights
exactly; LoRA and frozen modules train only what they leave trainable."""
from __future__ import annotations

import pytest
import torch
import yaml

from asrkit import checkpoint as ckpt
from asrkit.bin import convert_whisper
from asrkit.trained_model import load_trained_model
from tests.helpers import train_here
from tests.models.whisper.openai_files import DIMS, random_openai_file

pytest.importorskip("whisper")
pytestmark = pytest.mark.usefixtures("restore_threads")
# width 16: the 51,865-token embedding and CTC head are then 1.7 M of the model's parameters
NARROW = dict(DIMS, n_audio_state=16, n_text_state=16)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper_training")
    source = random_openai_file(folder / "tiny-random.pt", seed=5, dims=NARROW)
    assert convert_whisper.main(["--whisper_ckpt", str(source), "--output_dir", str(folder / "converted"),
                                 "--init_ctc"]) == 0
    return folder / "converted"


def whisper_config(converted, path, **top):
    """The converted train.yaml with the tiny corpus in 3 batches (3 optimizer steps), no dropout, one epoch."""
    cfg = yaml.safe_load((converted / "train.yaml").read_text())
    for side in ("encoder_conf", "decoder_conf"):
        cfg[side].update(dropout_rate=0.0, positional_dropout_rate=0.0)
    cfg["dataset_conf"].update(speed_perturb=False, spec_aug=False, spec_sub=False, num_workers=0,
                               batch_conf={"batch_type": "static", "batch_size": 16})
    cfg.update(optim="adam", optim_conf={"lr": 0.001}, scheduler_conf={"warmup_steps": 10}, max_epoch=1,
               accum_grad=1, log_interval=1, **top)
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_init_ctc_is_the_decoder_embedding(converted):
    state = ckpt.load_checkpoint(converted / "whisper.pt")["model"]
    assert torch.equal(state["ctc.ctc_lo.weight"], state["decoder.embed.weight"])


@pytest.mark.slow
def test_fine_tuning_resumes_mid_epoch_exactly(tiny_experiment, converted, tmp_path):
    config = whisper_config(converted, tmp_path / "c.yaml")
    start = ["--checkpoint", str(converted / "whisper.pt")]   # (model-only: WeNet's fine-tuning start)
    full, parted = tmp_path / "full", tmp_path / "parted"
    train_here(tiny_experiment, full, config, *start)
    first = train_here(tiny_experiment, parted, config, *start, "--max_steps", 2)
    assert "reached max_steps=2" in first.stderr and "fine-tuning from model-only checkpoint" in first.stderr
    second = train_here(tiny_experiment, parted, config, "--checkpoint", "auto")
    assert "(mid-epoch)" in second.stderr
    a, b = (ckpt.load_checkpoint(d / "epoch_0.pt") for d in (full, parted))
    assert a["train_state"]["step"] == b["train_state"]["step"] == 3
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    initial = ckpt.load_checkpoint(converted / "whisper.pt")["model"]
    assert not torch.equal(a["model"]["decoder.embed.weight"], initial["decoder.embed.weight"])


def test_lora_and_frozen_modules_train_only_what_they_leave(tiny_experiment, converted, tmp_path):
    config = whisper_config(converted, tmp_path / "lora.yaml", use_lora=True, only_optimize_lora=False,
                            freeze_modules=["encoder.embed.", "decoder.embed.", "decoder.pos_enc."],
                            lora_conf={"lora_modules": ["encoder.encoders", "decoder.decoders"], "lora_rank": 4})
    run = train_here(tiny_experiment, tmp_path / "lora", config, "--enc_init", str(converted / "whisper.pt"),
                     "--enc_init_mods", "encoder.,decoder.,ctc.", "--max_steps", 2)
    assert "trainable parameters" in run.stderr
    initial = ckpt.load_checkpoint(converted / "whisper.pt")["model"]
    model = load_trained_model(tmp_path / "lora" / "train.yaml", tmp_path / "lora" / "step_2.pt").model
    trained = model.state_dict()
    for frozen in ("encoder.embed.conv.0.weight", "decoder.embed.weight", "decoder.pos_enc.pe"):
        assert torch.equal(trained[frozen], initial[frozen]), frozen
    raw = ckpt.load_checkpoint(tmp_path / "lora" / "step_2.pt")["model"]
    adapter = raw["decoder.decoders.0.src_attn.linear_q.lora_B"]    # (B starts at zero)
    assert not torch.equal(adapter, torch.zeros_like(adapter))
    name = "decoder.decoders.0.src_attn.linear_q.weight"            # (the adapter merged in on loading)
    assert not torch.equal(trained[name], initial[name])
    assert not torch.equal(trained["ctc.ctc_lo.bias"], initial["ctc.ctc_lo.bias"])
