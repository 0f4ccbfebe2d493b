"""Encoders that hold weights their configuration never reads -- WeNet's layout keeps a
Branchformer block's pooling projections outside ``merge_method: learned_ave`` and an
Efficient Conformer strided block's ``concat_linear`` -- train on two DDP ranks.

DDP (``find_unused_parameters=False``) waits for a gradient of every trainable parameter and
fails the second step ("Expected to have finished reduction in the prior iteration") when one
never comes; such weights are created frozen and ``asrkit.finetune.freeze`` keeps them so
(counted as unused).  Two real gloo ranks (forked: ``tests.helpers.fork_ranks``), 3 steps."""
from __future__ import annotations

import pytest
import yaml

from tests.helpers import fork_ranks, train_args

pytestmark = pytest.mark.slow

ENCODERS = {
    "branchformer": {"output_size": 32, "attention_heads": 2, "cgmlp_linear_units": 64, "cgmlp_conv_kernel": 7,
                     "num_blocks": 2, "merge_method": "concat", "dropout_rate": 0.0,
                     "positional_dropout_rate": 0.0, "attention_dropout_rate": 0.0},
    "efficientConformer": {"output_size": 32, "attention_heads": 2, "linear_units": 64, "num_blocks": 3,
                           "cnn_module_kernel": 7, "cnn_module_norm": "layer_norm", "dropout_rate": 0.0,
                           "efficient_conf": {"stride_layer_idx": [1], "stride": [2], "group_layer_idx": [1, 2],
                                              "group_size": 2}},
}
UNUSED = {"branchformer": 2 * 4 * 33, "efficientConformer": 64 * 32 + 32}  # (elements)


@pytest.mark.parametrize("encoder", sorted(ENCODERS))
def test_ddp_trains_an_encoder_with_weights_its_configuration_never_reads(tiny_experiment, tmp_path, encoder):
    path = tiny_experiment.config(tmp_path / "base.yaml", dataset_conf={"batch_conf": {"batch_size": 4}})
    cfg = yaml.safe_load(path.read_text())
    cfg.update(encoder=encoder, encoder_conf=ENCODERS[encoder])
    path.write_text(yaml.safe_dump(cfg))
    argv = [*train_args(tiny_experiment, tmp_path / "exp", path), "--max_steps", "3"]
    fork_ranks([argv, argv], timeout=120, check=True)
    log0 = (tmp_path / "exp" / "log" / "rank0.log").read_text()
    assert f"{UNUSED[encoder]:,} unused by this configuration, kept for WeNet's checkpoint layout" in log0
    assert "epoch 0 step 3 " in log0
