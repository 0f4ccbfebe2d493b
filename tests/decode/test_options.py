"""``DecodingOptions``: checked once, when built, with one-line messages naming the option;
frozen; the modes a registered, non-empty tuple."""
import dataclasses
import subprocess
import sys

import pytest

from asrkit.decode import MODES, DecodingOptionError, DecodingOptions, ModeError
from asrkit.decode.ctc_search import DEFAULT_BLANK_SKIP_THRESHOLD
from asrkit.decode.options import check_encoder_context
from tests.helpers import REPO


@pytest.mark.parametrize("options, message", [
    (dict(decoding_chunk_size=-2), "decoding_chunk_size must be -1 or 0 (full context) or > 0 (chunk size in "
                                   "encoder frames), got -2"),
    (dict(num_decoding_left_chunks=-2, decoding_chunk_size=4),
     "num_decoding_left_chunks must be -1 (all left chunks) or >= 0, got -2"),
    (dict(simulate_streaming=True), "simulate_streaming needs decoding_chunk_size > 0, got -1"),
    (dict(simulate_streaming=True, decoding_chunk_size=0), "simulate_streaming needs decoding_chunk_size > 0, got 0"),
    (dict(simulate_streaming=True, decoding_chunk_size=-1), "simulate_streaming needs decoding_chunk_size > 0, got -1"),
    (dict(length_penalty=-0.5), "length_penalty must be >= 0, got -0.5"),
    (dict(blank_penalty=-1.0), "blank_penalty must be >= 0, got -1.0"),
    (dict(batch_size=0), "batch_size must be >= 1, got 0"),
    (dict(beam_size=0), "beam_size must be >= 1, got 0"),
    (dict(ctc_weight=-5.0), "ctc_weight must be in [0, 1], got -5.0"),
    (dict(ctc_weight=1.5), "ctc_weight must be in [0, 1], got 1.5"),
    (dict(reverse_weight=-0.1), "reverse_weight must be in [0, 1], got -0.1"),
    (dict(reverse_weight=float("nan")), "reverse_weight must be in [0, 1], got nan"),
])
def test_bad_options_are_refused_when_built(options, message):
    with pytest.raises(DecodingOptionError) as caught:
        DecodingOptions(modes=MODES, **options)
    assert str(caught.value) == message


def test_modes_are_registered_names_kept_as_a_tuple():
    assert DecodingOptions(modes=["attention", "ctc_greedy_search"]).modes == ("attention", "ctc_greedy_search")
    with pytest.raises(ModeError) as caught:
        DecodingOptions(modes=["ctc_greedy_search", "beam"])
    assert str(caught.value) == f"unknown decoding mode 'beam'; choose from {list(MODES)}"
    with pytest.raises(ModeError, match="no decoding mode given"):
        DecodingOptions(modes=[])
    with pytest.raises(TypeError, match="sequence of mode names"):
        DecodingOptions(modes="attention")


def test_defaults_are_wenets_and_the_options_are_frozen():
    options = DecodingOptions()
    assert (options.modes, options.beam_size, options.ctc_weight, options.reverse_weight) == (
        ("attention_rescoring",), 10, 0.3, 0.0)
    assert options.blank_skip_threshold == DEFAULT_BLANK_SKIP_THRESHOLD
    assert (options.decoding_chunk_size, options.num_decoding_left_chunks, options.simulate_streaming) == (-1, -1, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.beam_size = 3
    with pytest.raises(DecodingOptionError, match="length_penalty"):  # a changed copy is checked too
        dataclasses.replace(options, length_penalty=-1.0)


def test_encoder_context_in_words():
    assert DecodingOptions(decoding_chunk_size=-1).encoder_context() == "full context"
    assert not DecodingOptions(decoding_chunk_size=0).chunked
    chunked = DecodingOptions(decoding_chunk_size=16, num_decoding_left_chunks=4)
    assert chunked.chunked and chunked.encoder_context() == "chunk 16, left chunks 4"
    assert dataclasses.replace(chunked, simulate_streaming=True).encoder_context() == \
        "chunk 16, left chunks 4, chunk by chunk"


def test_chunks_are_refused_for_a_model_trained_with_full_context_only():
    check_encoder_context(DecodingOptions(decoding_chunk_size=16), chunk_trained=True)
    check_encoder_context(DecodingOptions(decoding_chunk_size=-1), chunk_trained=False)  # full context: always
    with pytest.raises(DecodingOptionError) as caught:
        check_encoder_context(DecodingOptions(decoding_chunk_size=16), chunk_trained=False)
    assert str(caught.value).startswith("decoding_chunk_size 16: the model was trained with full context only")


def test_the_options_and_the_command_lines_defaults_load_without_torch_or_the_searches():
    """The command lines build their parsers from ``DEFAULTS`` before torch loads (``asrkit
    --help`` stays fast); the registry, and with it the searches, loads when options are built."""
    code = ("import sys\n"
            "from asrkit.bin import cli\n"
            "cli.build_parser()\n"
            "loaded = [m for m in ('torch', 'asrkit.decode.modes', 'asrkit.decode.ctc_search') if m in sys.modules]\n"
            "assert not loaded, loaded\n"
            "from asrkit.decode.options import DecodingOptions\n"
            "DecodingOptions()\n"
            "assert 'asrkit.decode.modes' in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
