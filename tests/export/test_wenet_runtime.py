"""``final.zip`` under WeNet's C++ runtime: the saved archive of WeNet's own U2++ model
(``tests/fixtures/wenet/u2pp``) loaded back and driven exactly as the runtime's
``TorchAsrModel`` + ``AsrDecoder`` drive a model (WeNet's ``runtime/core/decoder``),
since the runtime itself cannot be built here (its CMake build downloads libtorch).

What the runtime does, and :func:`run_like_wenet_runtime` repeats:

* load time: ``subsampling_rate()``, ``right_context()``, ``sos_symbol()``,
  ``eos_symbol()`` (ints) and ``is_bidirectional_decoder()`` (a bool);
* features are read in windows: the first of ``(chunk − 1)·rate + right_context + 1``
  frames, then ``chunk·rate`` new frames after the last ``right_context + 1 − rate`` of
  the previous read (``AsrModel::num_frames_for_chunk`` / ``CacheFeature``); with
  ``--chunk_size -1`` one read of everything; a window is run only when it holds *more*
  than ``right_context + 1`` frames (``AsrModel::ForwardEncoder``);
* per window ``forward_encoder_chunk(feats, offset, chunk·num_left_chunks, att_cache,
  cnn_cache)`` (caches start as ``zeros(0, 0, 0, 0)``, are fed back, ``offset`` grows
  by the chunk's output frames), then ``ctc_activation`` and the CTC prefix beam search
  (``--nbest`` for both of its beams, no blank skipping) fed chunk by chunk;
* at the end the n-best padded with 0 behind ``<sos>`` into
  ``forward_attention_decoder(hyps, hyps_lens, cat(chunk outputs), reverse_weight)``,
  each scored ``rescoring_weight·((1 − rw)·l2r + rw·r2l) + ctc_weight·ctc`` and sorted.

The result must equal eager asrkit (encoder output within 1e-5 of the masked forward and
of ``forward_chunk_by_chunk``, final tokens of eager chunked ``attention_rescoring``) and,
with WeNet's reference settings, WeNet's own Python decoding.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from asrkit.decode import DecodingOptions, decode
from asrkit.decode.ctc_search import PrefixBeamSearch, ctc_prefix_beam_search_nbest
from asrkit.export import export_model, load_exported, script_model
from asrkit.text.units import read_units
from tests.models.wenet_reference import FIXTURES, load_wenet_model
from tests.models.tiny import tiny_model

WENET_FBANK = dict(sample_rate=16000, num_mel_bins=80, frame_length=25.0, frame_shift=10.0)
INT_MAX = 2 ** 31 - 1  # what num_frames_for_chunk asks for with --chunk_size -1 (read everything)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return load_wenet_model("u2pp")


@pytest.fixture(scope="module")
def archive(model, tmp_path_factory):
    """The saved ``final.zip`` loaded back, as ``torch::jit::load`` gives it to the runtime."""
    path = tmp_path_factory.mktemp("wenet_runtime") / "final.zip"
    units = read_units(FIXTURES / "u2pp" / "units.txt")
    export_model(model, units, path, **WENET_FBANK)
    module, _ = load_exported(path)
    return module


@pytest.fixture(scope="module")
def utterances():
    return torch.load(FIXTURES / "u2pp" / "reference_chunk4.pt", weights_only=True)["utts"]


@dataclass
class RuntimeResult:
    windows: list[int]            # feature frames of each forward_encoder_chunk call
    encoder_out: torch.Tensor     # [1, T', D], the chunk outputs concatenated
    nbest: list[list[int]]        # the CTC prefix beam search's n-best, best first
    ctc_scores: list[float]
    tokens: list[int]             # the final result after attention rescoring


def run_like_wenet_runtime(module, feats: torch.Tensor, chunk_size: int, num_left_chunks: int, *,
                           nbest: int = 10, ctc_weight: float = 0.5, rescoring_weight: float = 1.0,
                           reverse_weight: float = 0.0) -> RuntimeResult:
    """Decode ``feats [T, F]`` (raw fbank) the way WeNet's ``decoder_main`` does with
    ``--chunk_size``, ``--num_left_chunks``, ``--nbest``, ``--ctc_weight``,
    ``--rescoring_weight`` and ``--reverse_weight`` (their defaults here)."""
    rate = module.subsampling_rate()
    right_context = module.right_context()
    sos, eos = module.sos_symbol(), module.eos_symbol()
    bidirectional = module.is_bidirectional_decoder()
    kept_frames = 1 + right_context - rate  # CacheFeature
    required_cache_size = chunk_size * num_left_chunks
    att_cache = torch.zeros(0, 0, 0, 0)
    cnn_cache = torch.zeros(0, 0, 0, 0)
    cached = feats[:0]
    offset, position, started = 0, 0, False
    outputs: list[torch.Tensor] = []
    windows: list[int] = []
    search: PrefixBeamSearch | None = None
    with torch.no_grad():
        while True:
            if chunk_size > 0:  # num_frames_for_chunk
                wanted = chunk_size * rate if started else (chunk_size - 1) * rate + right_context + 1
            else:
                wanted = INT_MAX
            chunk = feats[position:position + wanted]  # FeaturePipeline::Read
            position += chunk.size(0)
            end_of_feats = chunk.size(0) < wanted
            if cached.size(0) + chunk.size(0) > right_context + 1:  # ForwardEncoder
                xs = torch.cat([cached, chunk]).unsqueeze(0)
                windows.append(xs.size(1))
                y, att_cache, cnn_cache = module.forward_encoder_chunk(xs, offset, required_cache_size,
                                                                       att_cache, cnn_cache)
                offset += y.size(1)
                log_probs = module.ctc_activation(y)[0]
                outputs.append(y)
                if chunk.size(0) >= kept_frames:
                    cached = chunk[chunk.size(0) - kept_frames:]
                if search is None:
                    search = PrefixBeamSearch(nbest, 0, log_probs.size(-1), blank_skip_threshold=1.0)
                search.feed(log_probs)
            started = True
            if end_of_feats:
                break
        assert search is not None, "no window was long enough"
        hyps, ctc_scores = search.nbest()
        encoder_out = torch.cat(outputs, dim=1)
        if rescoring_weight == 0.0:
            return RuntimeResult(windows, encoder_out, hyps, ctc_scores, hyps[0])
        width = max(len(h) for h in hyps) + 1  # TorchAsrModel::AttentionRescoring
        hyps_tensor = torch.zeros(len(hyps), width, dtype=torch.long)
        hyps_tensor[:, 0] = sos
        for i, h in enumerate(hyps):
            hyps_tensor[i, 1:len(h) + 1] = torch.tensor(h, dtype=torch.long)
        hyps_lens = torch.tensor([len(h) + 1 for h in hyps], dtype=torch.long)
        probs, r_probs = module.forward_attention_decoder(hyps_tensor, hyps_lens, encoder_out, reverse_weight)
    assert probs.shape[:2] == (len(hyps), width)
    totals = []
    for i, h in enumerate(hyps):
        score = sum(float(probs[i, j, tok]) for j, tok in enumerate(h)) + float(probs[i, len(h), eos])
        r_score = 0.0
        if bidirectional and reverse_weight > 0.0:
            assert r_probs.shape[:2] == (len(hyps), width)
            r_score = (sum(float(r_probs[i, j, tok]) for j, tok in enumerate(h[::-1]))
                       + float(r_probs[i, len(h), eos]))
        rescoring = score * (1.0 - reverse_weight) + r_score * reverse_weight
        totals.append(rescoring_weight * rescoring + ctc_weight * ctc_scores[i])
    best = max(range(len(hyps)), key=lambda i: totals[i])
    return RuntimeResult(windows, encoder_out, hyps, ctc_scores, hyps[best])


def test_load_time_interface_has_wenets_types_and_values(archive):
    """What ``TorchAsrModel::Read`` checks (``isInt`` / ``isBool``) and the signatures of
    the per-chunk and rescoring calls, positional as the runtime passes them."""
    metadata = {name: getattr(archive, name)() for name in
                ("subsampling_rate", "right_context", "sos_symbol", "eos_symbol", "is_bidirectional_decoder")}
    assert metadata == {"subsampling_rate": 4, "right_context": 6, "sos_symbol": 2, "eos_symbol": 2,
                        "is_bidirectional_decoder": True}
    assert [type(v) for v in metadata.values()] == [int, int, int, int, bool]

    def signature(method):
        schema = method.schema
        return ([(a.name, str(a.type)) for a in schema.arguments[1:]], [str(r.type) for r in schema.returns])

    assert signature(archive.forward_encoder_chunk) == (
        [("xs", "Tensor"), ("offset", "int"), ("required_cache_size", "int"), ("att_cache", "Tensor"),
         ("cnn_cache", "Tensor")], ["Tuple[Tensor, Tensor, Tensor]"])
    assert signature(archive.ctc_activation) == ([("encoder_out", "Tensor")], ["Tensor"])
    assert signature(archive.forward_attention_decoder) == (
        [("hyps", "Tensor"), ("hyps_lens", "Tensor"), ("encoder_out", "Tensor"), ("reverse_weight", "float")],
        ["Tuple[Tensor, Tensor]"])


@pytest.mark.parametrize("chunk_size, num_left_chunks, reverse_weight",
                         [(4, -1, 0.3), (4, 2, 0.3), (-1, -1, 0.3), (4, -1, 0.0)],
                         ids=["chunk4", "chunk4-left2", "full-context", "chunk4-no-reverse"])
def test_runtime_drive_equals_eager_asrkit(model, archive, utterances, chunk_size, num_left_chunks,
                                           reverse_weight):
    """Encoder output of the chunks (1e-5) and the final tokens equal eager asrkit decoding
    with the same chunk and left chunks (runtime defaults: nbest 10, ctc_weight 0.5)."""
    rate, context = 4, 6
    for utt in utterances:
        feats = utt["feats"]
        lengths = torch.tensor([feats.size(0)])
        got = run_like_wenet_runtime(archive, feats, chunk_size, num_left_chunks, reverse_weight=reverse_weight)
        with torch.inference_mode():
            if chunk_size > 0:
                masked, _ = model.encode(feats[None], lengths, chunk_size, num_left_chunks)
                streamed, _ = model.encoder.forward_chunk_by_chunk(model.cmvn(feats[None]), chunk_size,
                                                                   num_left_chunks)
                assert streamed.shape == got.encoder_out.shape, utt["wav"]
                assert (got.encoder_out - streamed).abs().max() < 1e-5, utt["wav"]
            else:
                masked, _ = model.encode(feats[None], lengths)
            assert masked.shape == got.encoder_out.shape, utt["wav"]
            assert (got.encoder_out - masked).abs().max() < 1e-5, utt["wav"]
            log_probs = model.ctc_log_probs(masked)
            want_nbest, want_scores = ctc_prefix_beam_search_nbest(log_probs, torch.tensor([masked.size(1)]), 10,
                                                                   0, 1.0)
            options = DecodingOptions(modes=["attention_rescoring"], beam_size=10, ctc_weight=0.5,
                                      reverse_weight=reverse_weight, blank_skip_threshold=1.0,
                                      decoding_chunk_size=chunk_size, num_decoding_left_chunks=num_left_chunks)
            want = decode(model, feats[None], lengths, options)
        assert got.nbest == want_nbest[0], utt["wav"]
        assert got.ctc_scores == pytest.approx(want_scores[0], abs=1e-3), utt["wav"]
        assert got.tokens == want["attention_rescoring"][0], utt["wav"]
        if chunk_size > 0:  # windows as the runtime reads them: first 19 frames, then 3 kept + 16 new
            full = (chunk_size - 1) * rate + context + 1
            assert got.windows[:-1] == [full] * (len(got.windows) - 1), utt["wav"]
            assert context + 1 < got.windows[-1] <= full, utt["wav"]
        else:
            assert got.windows == [feats.size(0)]


@pytest.mark.parametrize("reference", ["reference_chunk4.pt", "reference_chunk4_left2.pt"])
def test_runtime_drive_gives_wenets_own_results(archive, reference):
    """With WeNet's reference settings (beam 4, ctc_weight 0.3, reverse_weight 0.3) the
    runtime-driven archive reproduces WeNet's Python: chunk-by-chunk encoder output (1e-4)
    and attention-rescoring tokens, chunked and full context."""
    ref = torch.load(FIXTURES / "u2pp" / reference, weights_only=True)
    for utt in ref["utts"]:
        got = run_like_wenet_runtime(archive, utt["feats"], ref["chunk"], ref["left"], nbest=4, ctc_weight=0.3,
                                     reverse_weight=ref["reverse_weight"])
        assert got.encoder_out.shape == utt["chunk_by_chunk_encoder_out"].shape, utt["wav"]
        assert (got.encoder_out - utt["chunk_by_chunk_encoder_out"]).abs().max() < 1e-4, utt["wav"]
        assert got.tokens == utt["decode_chunk"]["attention_rescoring"]["tokens"], utt["wav"]
        if reference == "reference_chunk4.pt":
            full = run_like_wenet_runtime(archive, utt["feats"], -1, -1, nbest=4, ctc_weight=0.3,
                                          reverse_weight=ref["reverse_weight"])
            assert full.tokens == utt["decode_full"]["attention_rescoring"]["tokens"], utt["wav"]


def test_runtime_skips_a_last_window_of_right_context_plus_one_frames(model, archive, utterances):
    """``AsrModel::ForwardEncoder`` runs a window only with *more* than ``right_context + 1``
    frames, while WeNet's (and asrkit's) Python ``forward_chunk_by_chunk`` runs one of
    exactly that many: on 16·9 + 7 frames the runtime returns one encoder frame fewer."""
    feats = utterances[0]["feats"][:16 * 9 + 7]
    got = run_like_wenet_runtime(archive, feats, 4, -1)
    with torch.inference_mode():
        streamed, _ = model.encoder.forward_chunk_by_chunk(model.cmvn(feats[None]), 4, -1)
    assert got.windows == [19] * 9
    assert streamed.size(1) == got.encoder_out.size(1) + 1
    assert (got.encoder_out - streamed[:, :-1]).abs().max() < 1e-5


def test_models_without_a_head_or_a_model_cmvn_stream_too():
    """A causal conformer with a data-pipeline CMVN (applied inside forward_encoder_chunk
    too), with no decoder (rescoring refuses; the runtime's ``--rescoring_weight 0`` skips
    it), and without a CTC head (``ctc_activation`` refuses)."""
    mean, istd = torch.linspace(-1.0, 1.0, 20), torch.linspace(0.5, 2.0, 20)
    g = torch.Generator().manual_seed(3)
    feats = torch.randn(150, 20, generator=g) * 2.0 + 1.0
    causal = {"causal": True, "cnn_module_norm": "layer_norm"}
    ctc_only = tiny_model(vocab_size=9, seed=4, encoder_conf=causal, model_conf={"ctc_weight": 1.0}).eval()
    scripted = script_model(ctc_only, ["<blank>", "<unk>"] + list("abcdef") + ["<sos/eos>"],
                            feature_cmvn=(mean, istd), sample_rate=16000, num_mel_bins=20, frame_length=25.0,
                            frame_shift=10.0)
    assert scripted.is_bidirectional_decoder() is False
    got = run_like_wenet_runtime(scripted, feats, 4, 1, rescoring_weight=0.0)
    with torch.inference_mode():
        streamed, _ = ctc_only.encoder.forward_chunk_by_chunk(((feats - mean) * istd)[None], 4, 1)
        nbest, _ = ctc_prefix_beam_search_nbest(ctc_only.ctc_log_probs(streamed),
                                                torch.tensor([streamed.size(1)]), 10, 0, 1.0)
    assert (got.encoder_out - streamed).abs().max() < 1e-5
    assert got.nbest == nbest[0]
    with pytest.raises(Exception, match="no attention decoder"):
        run_like_wenet_runtime(scripted, feats, 4, 1)

    attention_only = tiny_model(vocab_size=9, seed=5, encoder_conf=causal, model_conf={"ctc_weight": 0.0}).eval()
    scripted = script_model(attention_only, ["<blank>", "<unk>"] + list("abcdef") + ["<sos/eos>"],
                            sample_rate=16000, num_mel_bins=20, frame_length=25.0, frame_shift=10.0)
    with torch.no_grad():
        y, att_cache, cnn_cache = scripted.forward_encoder_chunk(feats[None, :19], 0, -1)
        assert y.shape == (1, 4, 32) and att_cache.size(2) == 4 and cnn_cache.shape == (2, 1, 32, 4)
        with pytest.raises(Exception, match="need a CTC head"):
            scripted.ctc_activation(y)
