"""The decoding-mode registry: what each mode needs, one-line refusals of impossible modes,
a new mode as one entry sharing the batch's encoder pass and n-best; decode imports no
training code and its modules stay small."""
import subprocess
import sys

import pytest
import torch

from asrkit.decode import (MODES, REGISTRY, DecodingMode, DecodingOptions, ModeError, Searcher, check_modes, decode,
                           register_mode)
from asrkit.decode.modes import ATTENTION_DECODER, CTC_HEAD, TRANSDUCER, runnable_modes
from tests.helpers import REPO
from tests.models.tiny import tiny_model


def test_registry_states_what_each_mode_needs():
    assert MODES == tuple(REGISTRY) == ("ctc_greedy_search", "ctc_prefix_beam_search", "attention",
                                        "attention_rescoring", "rnnt_greedy_search", "rnnt_beam_search",
                                        "modified_beam_search", "rnnt_beam_attn_rescoring",
                                        "ctc_beam_td_attn_rescoring")
    assert REGISTRY["ctc_greedy_search"].needs == REGISTRY["ctc_prefix_beam_search"].needs == (CTC_HEAD,)
    assert REGISTRY["attention"].needs == (ATTENTION_DECODER,)
    assert REGISTRY["attention_rescoring"].needs == (CTC_HEAD, ATTENTION_DECODER)
    for mode in ("rnnt_greedy_search", "rnnt_beam_search", "modified_beam_search"):
        assert REGISTRY[mode].needs == (TRANSDUCER,)
    assert REGISTRY["rnnt_beam_attn_rescoring"].needs == (TRANSDUCER, ATTENTION_DECODER)
    assert REGISTRY["ctc_beam_td_attn_rescoring"].needs == (TRANSDUCER, CTC_HEAD, ATTENTION_DECODER)
    assert runnable_modes(tiny_model()) == list(MODES[:4])


@pytest.mark.parametrize("ctc_weight, mode, message", [
    (1.0, "attention", "mode attention needs an attention decoder; this model has none (trained with ctc_weight 1)"),
    (1.0, "attention_rescoring",
     "mode attention_rescoring needs an attention decoder; this model has none (trained with ctc_weight 1)"),
    (0.0, "ctc_greedy_search", "mode ctc_greedy_search needs a CTC head; this model has none (trained with ctc_weight 0)"),
    (0.0, "attention_rescoring",
     "mode attention_rescoring needs a CTC head; this model has none (trained with ctc_weight 0)"),
])
def test_impossible_modes_are_refused_in_one_line(ctc_weight, mode, message):
    model = tiny_model(model_conf={"ctc_weight": ctc_weight}).eval()
    with pytest.raises(ModeError) as caught:
        check_modes(model, ["ctc_prefix_beam_search" if ctc_weight == 1.0 else "attention", mode])
    assert str(caught.value) == message
    with pytest.raises(ModeError, match="unknown decoding mode 'beam'"):
        check_modes(model, ["beam"])
    with pytest.raises(ModeError, match="no decoding mode given"):
        check_modes(model, [])


def test_attention_only_model_decodes_with_attention():
    model = tiny_model(vocab_size=9, seed=4, model_conf={"ctc_weight": 0.0}).eval()
    x, lengths = torch.randn(2, 40, 20), torch.tensor([40, 29])
    hyps = decode(model, x, lengths, DecodingOptions(modes=["attention"], beam_size=3))
    assert list(hyps) == ["attention"] and len(hyps["attention"]) == 2


def test_a_new_mode_is_one_entry_and_shares_the_nbest(monkeypatch):
    model = tiny_model(vocab_size=9, seed=1).eval()
    with torch.no_grad():
        model.ctc.ctc_lo.bias[0] -= 1.0
    calls = []
    original = Searcher.ctc_nbest

    def counting(self, *args):
        calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(Searcher, "ctc_nbest", counting)
    second = DecodingMode("ctc_second_best", (CTC_HEAD,),
                          lambda shared: [h[1] if len(h) > 1 else [] for h in shared.nbest()[0]],
                          "second-best CTC prefix")
    register_mode(second)
    try:
        x, lengths = torch.randn(2, 50, 20, generator=torch.Generator().manual_seed(0)), torch.tensor([50, 41])
        modes = ["ctc_second_best", "ctc_prefix_beam_search", "attention_rescoring"]
        hyps = decode(model, x, lengths, DecodingOptions(modes=modes, beam_size=4))
        assert len(calls) == 1  # one prefix beam search for the three modes
        with torch.no_grad():
            enc, enc_lengths = model.encode(x, lengths)
            expected, _ = Searcher.of_model(model).ctc_nbest(model.ctc_log_probs(enc), enc_lengths, 4)
        assert hyps["ctc_second_best"] == [h[1] for h in expected]
        assert hyps["ctc_prefix_beam_search"] == [h[0] for h in expected]
        with pytest.raises(ValueError, match="already registered"):
            register_mode(second)
    finally:
        del REGISTRY["ctc_second_best"]


def test_decode_and_export_import_no_training_code():
    code = ("import sys, asrkit.decode, asrkit.decode.recognizer, asrkit.export, asrkit.bin.recognize, "
            "asrkit.bin.export\n"
            "loaded = sorted(m for m in sys.modules if m == 'asrkit.train' or m.startswith('asrkit.train.'))\n"
            "loaded = [m for m in loaded if m not in ('asrkit.train', 'asrkit.train.schema')]  # (config keys)\n"
            "assert not loaded, loaded\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
