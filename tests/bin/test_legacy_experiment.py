"""An experiment folder written before ``config_version`` 2 still decodes as it did.

``tests/fixtures/legacy_v1`` was made with asrkit before ``rel_pos`` took WeNet's meaning
(commit f06535e): a toy conformer (its ``pos_enc_layer_type: null``, then Transformer-XL
positions) trained 12 epochs on 800 utterances of the digits corpus, the average of its
last two checkpoints, six test wavs, and what that asrkit's ``recognize`` wrote for them in
all four modes (``expected/<mode>``).  Today's ``recognize`` on the same ``train.yaml`` and
checkpoint must write the same transcripts; read with today's meaning (WeNet's
``rel_pos``) the same weights give other ones.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from asrkit.bin import recognize
from asrkit.config import load_config
from asrkit.checkpoint.load import CheckpointError, load_checkpoint
from asrkit.models import build_model
from asrkit.checkpoint.weights import load_weights
from asrkit.text import read_units
from asrkit.text.vocabulary import Vocabulary

pytestmark = pytest.mark.usefixtures("restore_threads")  # (tests/conftest.py)

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy_v1"
MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]


def recognize_in(folder: Path, result_dir: Path, *extra: str) -> None:
    cwd = os.getcwd()
    os.chdir(folder)  # the list's and config's relative paths are the experiment's
    try:
        rc = recognize.main(["--config", "train.yaml", "--checkpoint", "avg_2.pt", "--data", "data.list",
                             "--result_dir", str(result_dir), "--modes", *MODES, "--beam_size", "10",
                             "--num_threads", "1", *extra])
    finally:
        os.chdir(cwd)
    assert rc == 0


def test_pre_version_experiment_decodes_as_before(tmp_path):
    recognize_in(LEGACY, tmp_path / "now")
    for mode in MODES:
        assert (tmp_path / "now" / mode / "text").read_text() == (LEGACY / "expected" / mode).read_text(), mode


def test_the_same_weights_read_as_wenets_rel_pos_decode_otherwise(tmp_path):
    """The trap the version guards against: same parameter names, other mathematics."""
    recognize_in(LEGACY, tmp_path / "wenet", "--override", "encoder_conf.pos_enc_layer_type=rel_pos")
    changed = [m for m in MODES
               if (tmp_path / "wenet" / m / "text").read_text() != (LEGACY / "expected" / m).read_text()]
    assert changed


def test_saved_config_without_version_reads_rel_pos_as_xl_and_user_configs_do_not():
    notes: list[str] = []
    legacy = load_config(LEGACY / "train.yaml", notes=notes)
    assert legacy.encoder_conf.pos_enc_layer_type == "rel_pos_xl" and legacy.config_version == 2
    assert legacy.tokenizer_conf.rules == "asrkit"  # its tokenization then
    assert any("rel_pos_xl" in n for n in notes)
    user = load_config(Path(__file__).resolve().parents[2] / "conf" / "train_conformer.yaml")
    assert user.encoder_conf.pos_enc_layer_type == "rel_pos" and user.tokenizer_conf.rules == "wenet"


def test_old_checkpoint_into_a_wenet_rel_pos_model_is_refused_naming_the_key(tmp_path):
    """A full training checkpoint of an old run (its ``config`` has no ``config_version``)
    resumed or decoded with a config that says ``rel_pos`` (now WeNet's) is refused."""
    cfg = load_config(LEGACY / "train.yaml", ["encoder_conf.pos_enc_layer_type=rel_pos"])
    vocabulary = Vocabulary.from_symbols(read_units(LEGACY / "units.txt"))
    model = build_model(cfg, cfg.input_dim, vocabulary, load_cmvn_stats=False)
    weights = load_checkpoint(LEGACY / "avg_2.pt")["model"]
    old = {"model": weights, "config": {"encoder": "conformer", "encoder_conf": {"pos_enc_layer_type": None}}}
    with pytest.raises(CheckpointError, match="before config_version 2.*pos_enc_layer_type: rel_pos_xl"):
        load_weights(model, old, "epoch_11.pt")
    load_weights(model, {**old, "config": {**old["config"], "config_version": 2}}, "epoch_11.pt")

