"""WeNet's dictionary as WeNet wrote it (``<blank> 0``, ``<unk> 1``, ``<sos/eos> 2``, then the
units; tests/fixtures/wenet/offline/units.txt, whose units are exactly the tiny corpus's
characters) with WeNet's ``special_tokens`` declaration, through every tool: train (a
bidirectional decoder, so the right-to-left targets are built too), average, recognize in
all four modes, export -- each using <sos/eos> = 2, never the last id (18, the unit ``▁``)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from asrkit.bin import average_model, export, recognize
from asrkit.config_files import load_text_inputs
from asrkit.config import load_config
from asrkit.data.lists import read_list
from asrkit.decode import DecodingOptions, decode
from asrkit.trained_model import build_trained_model
from asrkit.export import load_exported
from asrkit.text import read_units
from tests.helpers import train_here

MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring")

pytestmark = pytest.mark.usefixtures("restore_threads")  # (tests/conftest.py)

WENET_UNITS = Path(__file__).resolve().parents[1] / "fixtures" / "wenet" / "offline" / "units.txt"
WENET_SPECIAL = {"<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}
SOS_EOS, LAST = 2, 18


@pytest.fixture(scope="module")
def experiment(tiny_experiment, tmp_path_factory):
    """One epoch (3 optimizer steps) on the tiny corpus with WeNet's dictionary, and the
    average of its checkpoint: ``(root, model_dir, averaged checkpoint)``."""
    root = tmp_path_factory.mktemp("wenet_dictionary")
    config = tiny_experiment.config(
        root / "conf.yaml", decoder="bitransformer", decoder_conf={"r_num_blocks": 1},
        model_conf={"reverse_weight": 0.3}, ctc_conf={"ctc_blank_id": 0},
        tokenizer_conf={"symbol_table_path": str(WENET_UNITS), "special_tokens": WENET_SPECIAL},
        dataset_conf={"batch_conf": {"batch_size": 16}})
    model_dir = root / "exp"
    train_here(tiny_experiment, model_dir, config)
    avg = root / "avg.pt"
    assert average_model.main(["--model_dir", str(model_dir), "--num", "1", "--mode", "last",
                               "--dst", str(avg)]) == 0
    return root, model_dir, avg


def test_the_trained_model_decodes_with_the_dictionary_ids(experiment, tiny_experiment):
    root, model_dir, avg = experiment
    cfg = load_config(model_dir / "train.yaml")
    assert cfg.output_dim == 19 and cfg.tokenizer_conf.special_tokens == WENET_SPECIAL
    tokenizer = load_text_inputs(cfg, model_cmvn=False)
    for entry in read_list(tiny_experiment.corpus.splits["train"].data_list):  # every transcript: units only
        ids = tokenizer.encode(entry.txt)
        assert min(ids) >= 3 and tokenizer.decode(ids) == entry.txt
    assert tokenizer.unk_count == 0
    model = build_trained_model(cfg, avg, tokenizer.vocabulary)
    assert (model.sos, model.eos, model.blank_id, model.vocab_size) == (SOS_EOS, SOS_EOS, 0, 19)
    g = torch.Generator().manual_seed(3)
    feats, lengths = torch.randn(3, 90, 40, generator=g), torch.tensor([90, 70, 50])
    with torch.no_grad():
        hyps = decode(model, feats, lengths, DecodingOptions(modes=MODES, beam_size=4, reverse_weight=0.3))
        for mode in MODES:
            assert all(0 < t < 19 and t != SOS_EOS for h in hyps[mode] for t in h), (mode, hyps[mode])
        limit = model.encode(feats, lengths)[1].tolist()
        # attention search ends a hypothesis at id 2 ...
        bias = model.decoder.left_decoder.output_layer.bias
        bias[SOS_EOS] += 100.0
        attention = DecodingOptions(modes=["attention"], beam_size=4)
        assert decode(model, feats, lengths, attention)["attention"] == [[], [], []]
        bias[SOS_EOS] -= 100.0
        # ... and not at the last id: a decoder that only says 18 runs to the length limit
        bias[LAST] += 100.0
        assert decode(model, feats, lengths, attention)["attention"] == [[LAST] * n for n in limit]
        bias[LAST] -= 100.0


def test_training_targets_use_the_dictionary_ids(experiment, tiny_experiment, monkeypatch):
    """The forward pass the trainer runs, on the model as the tools load it: decoder inputs
    start with 2 and targets end with 2, left-to-right and right-to-left."""
    import asrkit.models.asr_model as asr_model
    root, model_dir, avg = experiment
    cfg = load_config(model_dir / "train.yaml")
    tokenizer = load_text_inputs(cfg, model_cmvn=False)
    model = build_trained_model(cfg, avg, tokenizer.vocabulary).train()
    texts = [e.txt for e in read_list(tiny_experiment.corpus.splits["dev"].data_list) if " " in e.txt][:3]
    ids = [torch.tensor(tokenizer.encode(t)) for t in texts]
    target = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=-1)
    target_lengths = torch.tensor([len(i) for i in ids])
    seen = {"in": [], "out": []}
    forward, loss = model.decoder.forward, asr_model.label_smoothing_loss

    def decoder_spy(memory, memory_mask, ys_in, ys_lengths, r_ys_in=None):
        seen["in"] += [ys_in, r_ys_in]
        return forward(memory, memory_mask, ys_in, ys_lengths, r_ys_in)

    def loss_spy(logits, ys_out, lsm_weight):
        seen["out"].append(ys_out)
        return loss(logits, ys_out, lsm_weight)

    monkeypatch.setattr(model.decoder, "forward", decoder_spy)
    monkeypatch.setattr(asr_model, "label_smoothing_loss", loss_spy)
    model(torch.randn(3, 120, 40), torch.tensor([120, 110, 100]), target, target_lengths)
    assert len(seen["in"]) == len(seen["out"]) == 2  # left-to-right and right-to-left
    for ys_in, ys_out in zip(seen["in"], seen["out"]):
        for row, n in enumerate(target_lengths.tolist()):
            assert ys_in[row, 0] == SOS_EOS and ys_in[row, 1:n + 1].tolist().count(SOS_EOS) == 0
            assert ys_out[row, n] == SOS_EOS and ys_out[row, :n].tolist().count(SOS_EOS) == 0
            assert LAST in ys_out[row, :n].tolist()  # the last id is a unit (▁, between words)


def test_recognize_all_modes_with_the_wenet_dictionary(experiment, tiny_experiment, capsys):
    root, model_dir, avg = experiment
    result = root / "decode"
    # the CMVN layer's statistics come from the checkpoint: its file is not needed to decode
    assert recognize.main(["--config", str(model_dir / "train.yaml"), "--checkpoint", str(avg),
                           "--data", str(tiny_experiment.corpus.splits["test"].data_list), "--modes", *MODES,
                           "--beam_size", "4", "--reverse_weight", "0.3", "--num_threads", "1",
                           "--result_dir", str(result), "--override", "cmvn_conf.cmvn_file=/nonexistent/cmvn"]) == 0
    letters = set("efghinorstuvwxz ")
    for mode in MODES:
        lines = (result / mode / "text").read_text(encoding="utf-8").splitlines()
        assert len(lines) == 12, mode
        texts = [line.split(maxsplit=1)[1] if " " in line else "" for line in lines]
        assert set("".join(texts)) <= letters, (mode, texts)  # no <sos/eos>, <blank> or <unk> spelled out
        assert mode == "ctc_greedy_search" or any(texts), mode  # (3 steps: greedy CTC still says blank)


def test_export_with_the_wenet_dictionary(experiment):
    root, model_dir, avg = experiment
    out = root / "final.zip"
    assert export.main(["--config", str(model_dir / "train.yaml"), "--checkpoint", str(avg),
                        "--output", str(out)]) == 0  # (verified against eager decoding in every mode)
    module, extra = load_exported(out)
    assert (module.sos_symbol(), module.eos_symbol(), module.blank_id()) == (SOS_EOS, SOS_EOS, 0)
    assert module.units() == read_units(WENET_UNITS)
    assert [line.split()[0] for line in extra["units.txt"].splitlines()] == read_units(WENET_UNITS)
