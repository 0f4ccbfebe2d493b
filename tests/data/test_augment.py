import torch

from asrkit.data.augment import spec_aug, spec_sub, spec_trim


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_spec_aug_zeroes_bounded_bands_and_is_reproducible():
    feat = torch.rand(200, 80) + 1.0  # no natural zeros
    out = spec_aug(feat, gen(), num_t_mask=2, num_f_mask=2, max_t=30, max_f=10)
    assert torch.equal(out, spec_aug(feat, gen(), num_t_mask=2, num_f_mask=2, max_t=30, max_f=10))
    assert feat.min() >= 1.0  # input untouched
    zero_rows = (out == 0).all(1).sum().item()
    zero_cols = (out == 0).all(0).sum().item()
    assert 1 <= zero_rows <= 60 and 1 <= zero_cols <= 20
    kept = out != 0
    assert torch.equal(out[kept], feat[kept])
    none = spec_aug(feat, gen(), num_t_mask=0, num_f_mask=0, max_t=30, max_f=10)
    assert torch.equal(none, feat)


def test_spec_aug_time_fraction_bounds_masks_of_short_utterances():
    """max_t_fraction: two masks over 40 frames cover at most 0.2 * 40 = 8 of them (WeNet's
    max_t alone lets them hide up to 40); 4 frames leave no room for a mask at all."""
    covered = []
    for seed in range(200):
        feat = torch.rand(40, 80) + 1.0
        out = spec_aug(feat, gen(seed), num_t_mask=2, num_f_mask=0, max_t=20, max_f=10, max_t_fraction=0.2)
        covered.append(int((out == 0).all(1).sum()))
    assert max(covered) == 8 and min(covered) >= 1
    wenet = [int((spec_aug(torch.rand(40, 80) + 1.0, gen(seed), num_t_mask=2, num_f_mask=0, max_t=20,
                           max_f=10) == 0).all(1).sum()) for seed in range(200)]
    assert max(wenet) > 20
    short = torch.rand(4, 80) + 1.0
    assert torch.equal(spec_aug(short, gen(), num_t_mask=2, num_f_mask=0, max_t=20, max_f=10,
                                max_t_fraction=0.2), short)


def test_spec_sub_copies_earlier_frames():
    feat = torch.arange(100, dtype=torch.float32).unsqueeze(1).repeat(1, 4)  # row i holds value i
    out = spec_sub(feat, gen(3), num_t_sub=3, max_t=20)
    assert out.shape == feat.shape
    assert (out[:, 0] <= feat[:, 0]).all()  # every frame is itself or an earlier one
    changed = (out[:, 0] != feat[:, 0]).nonzero().flatten()
    assert all(out[i, 0] < i for i in changed.tolist())
    assert 0 < changed.numel() <= 3 * 20  # something was substituted (the identity fails), within the spans
    assert torch.equal(out, spec_sub(feat, gen(3), num_t_sub=3, max_t=20))  # seeded: the same draw again
    others = [spec_sub(feat, gen(seed), num_t_sub=3, max_t=20) for seed in range(4, 8)]
    assert any(not torch.equal(out, other) for other in others)


def test_spec_trim_drops_trailing_frames_only_when_short_enough():
    feat = torch.rand(100, 8)
    out = spec_trim(feat, gen(1), max_t=20)
    assert 80 <= out.shape[0] < 100 and torch.equal(out, feat[: out.shape[0]])
    short = torch.rand(4, 8)
    assert spec_trim(short, gen(1), max_t=20).shape[0] == 4
