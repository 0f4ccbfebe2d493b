import math

import pytest
import torch

from asrkit.models.attention import (MultiHeadedAttention, RelPositionMultiHeadedAttention,
                                    XLRelPositionMultiHeadedAttention, allow_rows_without_keys, rel_shift)
from asrkit.models.embedding import RelPositionalEncoding, XLRelPositionalEncoding


def naive_sinusoid(position: int, dim: int) -> torch.Tensor:
    row = torch.zeros(dim)
    for i in range(0, dim, 2):
        angle = position / (10000 ** (i / dim))
        row[i] = math.sin(angle)
        row[i + 1] = math.cos(angle)
    return row


def naive_rel_attention(att: RelPositionMultiHeadedAttention, x: torch.Tensor, length: int,
                        position_of) -> torch.Tensor:
    """score[i, j] = ((q_i + u)·k_j + (q_i + v)·W_pos PE(position_of(i, j))) / sqrt(d_k), one
    position at a time."""
    t, d = x.shape
    h, dk = att.h, att.d_k
    q = att.linear_q(x).view(t, h, dk)
    k = att.linear_k(x).view(t, h, dk)
    v = att.linear_v(x).view(t, h, dk)
    out = torch.zeros(t, h, dk)
    for head in range(h):
        for i in range(t):
            scores = []
            for j in range(length):
                p = att.linear_pos(naive_sinusoid(position_of(i, j), d)).view(h, dk)[head]
                content = torch.dot(q[i, head] + att.pos_bias_u[head], k[j, head])
                position = torch.dot(q[i, head] + att.pos_bias_v[head], p)
                scores.append((content + position) / math.sqrt(dk))
            weights = torch.softmax(torch.stack(scores), dim=0)
            out[i, head] = sum(weights[j] * v[j, head] for j in range(length))
    return att.linear_out(out.reshape(t, d))


def test_rel_shift_picks_relative_distance():
    t = 5
    # column k of row i holds distance T-1-k; encode (i, distance) to check the pick
    scores = torch.tensor([[100 * i + (t - 1 - k) for k in range(2 * t - 1)] for i in range(t)])
    shifted = rel_shift(scores)
    for i in range(t):
        for j in range(t):
            assert shifted[i, j] == 100 * i + (i - j)



def test_rel_shift_of_a_chunk_against_cached_keys():
    tq, tk = 3, 7  # queries are the last 3 of 7 keys; columns hold distances tk−1 .. −(tq−1)
    width = tq + tk - 1
    scores = torch.tensor([[100 * i + (tk - 1 - c) for c in range(width)] for i in range(tq)])
    shifted = rel_shift(scores)
    assert shifted.shape == (tq, tk)
    for i in range(tq):
        for j in range(tk):
            assert shifted[i, j] == 100 * i + (tk - tq + i - j)


# (attention, its encoding, the encoding's offset, the position whose table row scores key j
# for query i): WeNet's rel_pos scores the key's own position, Transformer-XL's the distance
VARIANTS = {
    "rel_pos": (RelPositionMultiHeadedAttention, RelPositionalEncoding, 0, lambda i, j: j),
    "rel_pos offset 3": (RelPositionMultiHeadedAttention, RelPositionalEncoding, 3, lambda i, j: 3 + j),
    "rel_pos_xl": (XLRelPositionMultiHeadedAttention, XLRelPositionalEncoding, 0, lambda i, j: i - j),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rel_position_attention_matches_naive_loop(variant):
    attention, encoding, offset, position_of = VARIANTS[variant]
    torch.manual_seed(0)
    d, heads, t = 16, 4, 7
    att = attention(heads, d, 0.0).eval()
    with torch.no_grad():
        att.pos_bias_u.normal_()
        att.pos_bias_v.normal_()
    pos = encoding(d, 0.0).eval()
    x = torch.randn(2, t, d)
    lengths = [t, 4]
    mask = (torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).unsqueeze(1)
    _, pos_emb = pos(x, offset) if offset else pos(x)
    with torch.no_grad():
        fast = att(x, x, x, mask, pos_emb)
        for b, n in enumerate(lengths):
            slow = naive_rel_attention(att, x[b], n, position_of)
            torch.testing.assert_close(fast[b, :n], slow[:n], atol=1e-5, rtol=1e-4)
            # padded queries still see only valid keys
            torch.testing.assert_close(fast[b, n:], slow[n:], atol=1e-5, rtol=1e-4)


def test_plain_attention_ignores_masked_keys():
    torch.manual_seed(0)
    att = MultiHeadedAttention(2, 8, 0.0).eval()
    x = torch.randn(1, 6, 8)
    mask = torch.tensor([[[True, True, True, False, False, False]]])
    y = x.clone()
    y[:, 3:] = 100.0  # garbage in masked keys must not matter
    with torch.no_grad():
        torch.testing.assert_close(att(x, x, x, mask)[:, :3], att(x[:, :3], x[:, :3], x[:, :3], mask[..., :3]))
        torch.testing.assert_close(att(x, y, y, mask), att(x, x, x, mask))


def test_rows_without_keys_are_opened_and_flagged_for_a_zero_context():
    """Softmax over a row with no allowed key is NaN in plain arithmetic (ONNX, older
    torch): such rows are opened to every key and flagged so ``attend`` zeroes them."""
    mask = torch.tensor([[[True, False, False], [False, False, False], [True, True, False]]])
    opened, no_key = allow_rows_without_keys(mask)
    assert opened.tolist() == [[[True, False, False], [True, True, True], [True, True, False]]]
    assert no_key is not None and no_key.shape == (1, 1, 3, 1)
    assert no_key.flatten().tolist() == [False, True, False]
    same_keys = torch.tensor([[[True, False, True]]])
    opened, no_key = allow_rows_without_keys(same_keys)
    assert opened is same_keys and no_key is None


def test_bf16_attention_on_cpu_is_computed_in_fp32(monkeypatch):
    """Under CPU bf16 autocast the scores and softmax run in fp32 (the bf16 flash-attention
    backward is ~6x slower on a CPU: docs/performance.md) and the context comes back in bf16,
    close to the fp32 module's (bf16's own rounding of the projections around it)."""
    import asrkit.models.attention as attention
    torch.manual_seed(0)
    att = RelPositionMultiHeadedAttention(4, 32, 0.0).eval()
    x = torch.randn(2, 9, 32)
    pos = RelPositionalEncoding(32, 0.0)(x)[1]
    mask = torch.ones(2, 1, 9, dtype=torch.bool)
    mask[1, :, 6:] = False
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording(q, k, v, **kw):
        seen.append((q.dtype, None if kw.get("attn_mask") is None else kw["attn_mask"].dtype))
        return sdpa(q, k, v, **kw)
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", recording)
    want = att(x, x, x, mask, pos)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = att(x, x, x, mask, pos)
    assert seen[0] == (torch.float32, torch.float32)  # fp32 module
    assert seen[1] == (torch.float32, torch.float32)  # under bf16 autocast: still fp32 inside
    assert got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() < 0.05 * want.abs().max()
