"""The exported module's decoding modes are the registry's (asrkit.decode.modes): for every
kind of model -- CTC head and attention decoder, CTC only, attention only, bidirectional
decoder with and without a CTC head -- ``supported_modes()`` lists what ``check_modes``
accepts, and ``decode`` and the per-mode methods refuse every other mode with the message
``check_modes`` gives, also after a save/load round trip."""
import io
import warnings

import pytest
import torch

from asrkit.decode import REGISTRY, ModeError, Searcher, check_modes
from asrkit.export import script_model
from asrkit.export.torchscript import SCRIPTED_MODES
from tests.models.tiny import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

FEAT = dict(sample_rate=16000, num_mel_bins=20, frame_length=25.0, frame_shift=10.0)
BIDIRECTIONAL = dict(decoder="bitransformer", decoder_conf={"r_num_blocks": 1})
KINDS = {  # name: (tiny_model sections, (CTC head, attention decoder, right-to-left decoder))
    "ctc_and_attention": ({}, (True, True, False)),
    "ctc_only": (dict(model_conf={"ctc_weight": 1.0}), (True, False, False)),
    "attention_only": (dict(model_conf={"ctc_weight": 0.0}), (False, True, False)),
    "bidirectional": (dict(BIDIRECTIONAL, model_conf={"reverse_weight": 0.3}), (True, True, True)),
    "bidirectional_attention_only": (dict(BIDIRECTIONAL, model_conf={"ctc_weight": 0.0, "reverse_weight": 0.3}),
                                     (False, True, True)),
}


def python_refusal(model, mode: str):
    """The registry's refusal of ``mode`` for ``model`` (``None``: it runs it)."""
    try:
        check_modes(model, [mode])
    except ModeError as e:
        return str(e)
    return None


def scripted_refusal(call):
    """The message of the ``RuntimeError`` the scripted ``call()`` raises (``None``: none)."""
    try:
        call()
    except torch.jit.Error as e:
        last = str(e).strip().splitlines()[-1]
        assert last.startswith("builtins.RuntimeError: "), last
        return last[len("builtins.RuntimeError: "):]
    return None


def round_trip(scripted):
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(scripted, buffer)
        buffer.seek(0)
        return torch.jit.load(buffer)


@pytest.mark.parametrize("kind", list(KINDS))
def test_supported_modes_and_refusals_are_the_registrys(kind):
    sections, heads = KINDS[kind]
    model = tiny_model(vocab_size=9, seed=5, **sections).eval()
    searcher = Searcher.of_model(model)
    assert (searcher.has_ctc(), searcher.has_decoder(), searcher.bidirectional) == heads
    # (the archive holds the scriptable searches: the transducer's are not among them)
    expected = {mode: python_refusal(model, mode) for mode in REGISTRY if mode in SCRIPTED_MODES}
    x, lengths = torch.randn(2, 24, 20, generator=torch.Generator().manual_seed(5)), torch.tensor([24, 17])
    supported = [mode for mode, reason in expected.items() if reason is None]
    scripted = script_model(model, ["<blank>", "<unk>", *"abcdef", "<sos/eos>"], **FEAT)
    with torch.no_grad():
        assert list(scripted.decode(x, lengths, beam_size=2, modes=supported)) == supported
        for module in (scripted, round_trip(scripted)):  # (a refusal comes before the encoder runs)
            assert module.supported_modes() == supported
            assert module.is_bidirectional_decoder() == heads[2]
            for mode, reason in expected.items():
                if reason is not None:
                    assert scripted_refusal(lambda: module.decode(x, lengths, beam_size=2, modes=[mode])) == reason
                    if not mode.startswith("rnnt_") and mode != "modified_beam_search":  # (decode only)
                        assert scripted_refusal(lambda: getattr(module, mode)(x, lengths)) == reason, mode
            unknown = scripted_refusal(lambda: module.decode(x, lengths, modes=[supported[0], "beam"]))
            assert unknown == f"unknown decoding mode 'beam'; choose from {list(SCRIPTED_MODES)}"
