"""The predictors' streaming interface (``asrkit.models.transducer.predictor``), which the
searches rely on: a sequence fed step by step from ``init_state`` equals the full forward;
a row with padding 1 keeps its state; a state split per utterance and joined back is the
same state; ``forward`` continues from a given state.  And the stateless kinds compute
WeNet's formulas (``embedding``: ``pos_embed`` read as ``[n_head, embed, context]``, heads
summed; ``conv``: a depthwise convolution over the window, zero vectors before the start)."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from asrkit.models.transducer.predictor import ConvPredictor, EmbeddingPredictor, RNNPredictor

pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread, immune to a busy machine

VOCAB = 11
KINDS = {
    "lstm": lambda: RNNPredictor(VOCAB, 8, 6, 0.0, hidden_size=10, num_layers=2, rnn_type="lstm", dropout=0.0),
    "gru": lambda: RNNPredictor(VOCAB, 8, 6, 0.0, hidden_size=10, num_layers=1, rnn_type="gru"),
    "rnn": lambda: RNNPredictor(VOCAB, 8, 6, 0.0, hidden_size=10, num_layers=1, rnn_type="rnn"),
    "embedding": lambda: EmbeddingPredictor(VOCAB, 8, 8, 0.0, n_head=2, history_size=2),
    "embedding_history_0": lambda: EmbeddingPredictor(VOCAB, 8, 8, 0.0, n_head=3, history_size=0),
    "conv": lambda: ConvPredictor(VOCAB, 8, 8, 0.0, history_size=2, bias=True),
}


@pytest.fixture(params=sorted(KINDS))
def predictor(request):
    torch.manual_seed(0)
    return KINDS[request.param]().eval()


def tokens(batch: int = 3, length: int = 5, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def steps(predictor, ys: torch.Tensor, cache=None, padding=None):
    """Feed ``ys`` one column at a time: (outputs ``[B, U, P]``, the last state)."""
    cache = predictor.init_state(ys.size(0), ys.device) if cache is None else cache
    outs = []
    for i in range(ys.size(1)):
        pad = torch.zeros(ys.size(0), 1) if padding is None else padding[:, i:i + 1]
        out, cache = predictor.forward_step(ys[:, i:i + 1], pad, cache)
        outs.append(out)
    return torch.cat(outs, dim=1), cache


@torch.no_grad()
def test_steps_from_init_state_equal_the_full_forward(predictor):
    ys = tokens()
    full = predictor(ys)
    assert full.shape == (3, 5, predictor.output_size())
    stepped, _ = steps(predictor, ys)
    assert torch.allclose(stepped, full, atol=1e-6)


@torch.no_grad()
def test_forward_continues_from_a_given_state(predictor):
    ys = tokens()
    _, state = steps(predictor, ys[:, :2])
    assert torch.allclose(predictor(ys[:, 2:], state), predictor(ys)[:, 2:], atol=1e-6)


@torch.no_grad()
def test_padding_one_keeps_the_rows_state(predictor):
    """Row 1 is padded at step 2: its state after the step is its state before, and its later
    outputs are those of the sequence without that token; row 0 is not affected."""
    ys = tokens()
    padding = torch.zeros(3, 5)
    padding[1, 2] = 1.0
    _, before = steps(predictor, ys[:, :2])
    _, after = predictor.forward_step(ys[:, 2:3], padding[:, 2:3], before)
    rows_before, rows_after = predictor.batch_to_cache(before), predictor.batch_to_cache(after)
    assert all(torch.equal(a, b) for a, b in zip(rows_before[1], rows_after[1]))
    stateful = any(state.numel() for state in before)  # (history_size 0: no state at all)
    assert not stateful or not all(torch.equal(a, b) for a, b in zip(rows_before[0], rows_after[0]))
    out, _ = steps(predictor, ys, padding=padding)
    skipped = torch.cat([ys[1:2, :2], ys[1:2, 3:]], dim=1)
    assert torch.allclose(out[1, 3:], predictor(skipped)[0, 2:], atol=1e-6)
    assert torch.allclose(out[0], predictor(ys[:1])[0], atol=1e-6)


@torch.no_grad()
def test_batch_to_cache_and_back_is_the_same_state(predictor):
    _, state = steps(predictor, tokens())
    rows = predictor.batch_to_cache(state)
    assert len(rows) == 3 and all(len(row) == len(state) for row in rows)
    joined = predictor.cache_to_batch(rows)
    assert all(torch.equal(a, b) for a, b in zip(joined, state))
    # rows recombined in another order (what a beam does) are that order's batch
    order = [2, 0, 0]
    reordered = predictor.cache_to_batch([rows[i] for i in order])
    for row, i in zip(predictor.batch_to_cache(reordered), order):
        assert all(torch.equal(a, b) for a, b in zip(row, rows[i]))
    out, _ = predictor.forward_step(torch.tensor([[4], [5], [6]]), torch.zeros(3, 1), reordered)
    alone, _ = predictor.forward_step(torch.tensor([[4]]), torch.zeros(1, 1), rows[2])
    assert torch.allclose(out[0], alone[0], atol=1e-6)


@torch.no_grad()
def test_embedding_predictor_is_wenets_formula():
    """WeNet's per-head loop, written out: ``pos_embed.weight`` viewed as ``[n_head, embed,
    context]``, history padded with zero vectors, mean over heads and context."""
    torch.manual_seed(0)
    p = EmbeddingPredictor(VOCAB, 8, 8, 0.0, n_head=4, history_size=1).eval()
    ys = tokens(2, 4)
    emb = torch.cat([torch.zeros(2, 1, 8), p.embed(ys)], dim=1)
    pos = p.pos_embed.weight.view(4, 8, 2)
    want = torch.zeros(2, 4, 8)
    for u in range(4):
        window = emb[:, u:u + 2]                                          # [B, C, E]
        for h in range(4):
            weight = (window * pos[h].t()).sum(-1)                        # [B, C]
            want[:, u] += (weight.unsqueeze(-1) * window).sum(1)
    want = F.silu(p.norm(p.ffn(want / (4 * 2))))
    assert torch.allclose(p(ys), want, atol=1e-5)


@torch.no_grad()
def test_conv_predictor_is_a_depthwise_convolution_over_zero_padded_history():
    torch.manual_seed(0)
    p = ConvPredictor(VOCAB, 8, 8, 0.0, history_size=2, bias=True).eval()
    ys = tokens(2, 4)
    x = torch.cat([torch.zeros(2, 2, 8), p.embed(ys)], dim=1).transpose(1, 2)
    want = F.relu(p.norm(p.conv(x).transpose(1, 2)))
    assert torch.allclose(p(ys), want, atol=1e-6)


def test_stateless_kinds_need_output_size_equal_to_embed_size():
    with pytest.raises(ValueError, match="must equal embed_size"):
        EmbeddingPredictor(VOCAB, 8, 6, 0.0, n_head=2)
    with pytest.raises(ValueError, match="must equal embed_size"):
        ConvPredictor(VOCAB, 8, 6, 0.0)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit.script deprecation notice
@torch.no_grad()
def test_every_kind_scripts_with_its_streaming_methods(predictor):
    """The searches are scripted for export: the predictor's methods must compile, and compute
    what the eager ones do."""
    scripted = torch.jit.script(predictor)
    ys, padding = tokens(), torch.tensor([[0.0], [1.0], [0.0]])
    assert torch.equal(scripted(ys), predictor(ys))
    state = scripted.init_state(3, torch.device("cpu"))
    out, new = scripted.forward_step(ys[:, :1], padding, state)
    want, want_new = predictor.forward_step(ys[:, :1], padding, predictor.init_state(3, torch.device("cpu")))
    assert torch.equal(out, want) and all(torch.equal(a, b) for a, b in zip(new, want_new))
    assert all(torch.equal(a, b) for a, b in zip(scripted.cache_to_batch(scripted.batch_to_cache(new)), new))
    assert scripted.output_size() == predictor.output_size()
