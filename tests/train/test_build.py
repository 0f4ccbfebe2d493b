"""``build_training``: the one construction of a training run (trainer, benchmarks, tests)."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import load_config
from asrkit.train.build import InitError, build_training, choose_attention_backend
from asrkit.train.dist import DistContext
from asrkit.train.job import ModuleInit


def _lists(exp) -> dict:
    split = exp.corpus.splits
    return dict(train_data=str(split["train"].data_list), cv_data=str(split["dev"].data_list))


def test_build_is_deterministic_and_resolves_the_config(tiny_experiment, tmp_path):
    cfg = load_config(tiny_experiment.config(tmp_path / "c.yaml", accum_grad=2, reference_world_size=1,
                                             keep_global_batch=True))
    a = build_training(cfg, DistContext(), **_lists(tiny_experiment))
    b = build_training(cfg, DistContext(), **_lists(tiny_experiment))
    assert a.cfg.input_dim == cfg.dataset_conf.fbank_conf.num_mel_bins == 40 and a.cfg.output_dim == a.tokenizer.vocab_size
    assert a.model is a.bare_model  # one process: no DDP wrapper
    assert len(a.train_entries) == 48 and len(a.cv_entries) == 12 and a.cv_loader is not None
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), name
    # keep_global_batch: 1 reference rank x accum 2 on 2 ranks -> accum 1 (the config keeps 2)
    two = build_training(cfg, DistContext(rank=1, world_size=2), **_lists(tiny_experiment))
    assert (two.cfg.accum_grad, two.train_cfg.accum_grad) == (2, 1)
    assert len(two.train_loader) < len(a.train_loader)  # sharded by rank


def test_enc_init_failure_is_an_init_error(tiny_experiment, tmp_path):
    cfg = load_config(tiny_experiment.config(tmp_path / "c.yaml"))
    bad = tmp_path / "other.pt"
    torch.save({"model": {"encoder.nothing": torch.zeros(1)}}, bad)
    with pytest.raises(InitError, match="cannot initialise from --enc_init: .*encoder"):
        build_training(cfg, DistContext(), init=ModuleInit(str(bad), "encoder."), **_lists(tiny_experiment))


def test_cudnn_attention_is_off_on_cuda_unless_the_config_allows_it(tiny_experiment, tmp_path):
    """``cudnn_sdpa`` (default false) sets torch's process-wide cuDNN attention switch on CUDA
    and leaves it alone elsewhere; torch's own default is on."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        cfg = load_config(tiny_experiment.config(tmp_path / "c.yaml"))
        assert cfg.cudnn_sdpa is False
        choose_attention_backend(cfg, torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        choose_attention_backend(cfg, torch.device("cuda"))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        allowed = load_config(tiny_experiment.config(tmp_path / "d.yaml", cudnn_sdpa=True))
        choose_attention_backend(allowed, torch.device("cuda"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
