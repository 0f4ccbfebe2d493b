"""A transducer config trains through ``asrkit.bin.train`` as it is (the trainer reads the
loss dict by name: ``loss_rnnt`` is logged for training and CV), and the trained experiment
decodes with the CTC modes its head allows (the decoding-mode registry checks the heads)."""
from __future__ import annotations

import re

import pytest

from tests.helpers import distinct_utterance_list, train_here

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_transducer_trains_and_its_ctc_head_decodes(tiny_experiment, tmp_path):
    from asrkit.bin import recognize
    exp, split = tiny_experiment, tiny_experiment.corpus.splits
    config = exp.config(tmp_path / "transducer.yaml", model="transducer", predictor="embedding",
                        predictor_conf={"embed_size": 32, "output_size": 32, "embed_dropout": 0.1, "n_head": 2,
                                        "history_size": 1},
                        joint_conf={"join_dim": 32},
                        model_conf={"transducer_weight": 0.7, "ctc_weight": 0.3, "attention_weight": 0.0})
    train_list = distinct_utterance_list(split["train"].data_list, tmp_path / "train.list", 8)
    cv_list = distinct_utterance_list(split["dev"].data_list, tmp_path / "cv.list", 4)
    log = train_here(exp, tmp_path / "exp", config, train_list=train_list).stderr
    assert re.search(r"step 1 .*\| loss [\d.]+ \| loss_rnnt [\d.]+ \| loss_ctc [\d.]+ \|", log), log[-2000:]
    assert re.search(r"CV epoch 0: loss [\d.]+ \| loss_rnnt [\d.]+ \| loss_ctc [\d.]+", log), log[-2000:]
    assert recognize.main(["--config", str(tmp_path / "exp" / "train.yaml"), "--checkpoint",
                           str(tmp_path / "exp" / "epoch_0.pt"), "--data", str(cv_list), "--result_dir",
                           str(tmp_path / "decode"), "--num_threads", "1", "--modes", "ctc_greedy_search"]) == 0
    assert len((tmp_path / "decode" / "ctc_greedy_search" / "text").read_text().splitlines()) == 4
