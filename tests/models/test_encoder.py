import pytest
import torch

from asrkit.models.subsampling import Conv2dSubsampling
from asrkit.models.embedding import PositionalEncoding
from tests.models.tiny import tiny_model


@pytest.mark.parametrize("rate", [4, 6, 8])
def test_subsampling_lengths_match_conv_output(rate):
    sub = Conv2dSubsampling(20, 8, rate, PositionalEncoding(8, 0.0))
    for n in range(sub.min_input_length, sub.min_input_length + 40):
        x, _, lengths = sub(torch.zeros(1, n, 20), torch.tensor([n]))
        assert x.size(1) == int(lengths[0]) >= 1
    assert int(sub.output_lengths(torch.tensor([sub.min_input_length - 1]))[0]) == 0


@pytest.mark.parametrize("encoder,extra", [
    ("conformer", {"cnn_module_norm": "batch_norm"}),
    ("conformer", {"cnn_module_norm": "layer_norm", "input_layer": "conv2d6"}),
    ("conformer", {"normalize_before": False, "input_layer": "conv2d8"}),
    ("transformer", {}),
])
def test_encoder_output_same_alone_and_in_padded_batch(encoder, extra):
    model = tiny_model(encoder=encoder, encoder_conf=extra).eval()
    lengths = [61, 37, 90]
    g = torch.Generator().manual_seed(3)
    feats = torch.randn(3, 90, 20, generator=g)
    with torch.no_grad():
        batch_out, batch_lengths = model.encode(feats, torch.tensor(lengths))
        for b, n in enumerate(lengths):
            alone, alone_len = model.encode(feats[b:b + 1, :n], torch.tensor([n]))
            assert int(alone_len[0]) == int(batch_lengths[b]) == alone.size(1)
            torch.testing.assert_close(batch_out[b, : alone.size(1)], alone[0], atol=2e-5, rtol=1e-4)


def test_too_short_input_is_a_clear_error():
    model = tiny_model().eval()
    with pytest.raises(ValueError, match="at least 7"):
        model.encode(torch.zeros(2, 10, 20), torch.tensor([10, 5]))


def test_conv_module_batch_norm_converts_to_sync_batch_norm():
    model = tiny_model(encoder_conf={"cnn_module_norm": "batch_norm"})
    converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert any(isinstance(m, torch.nn.SyncBatchNorm) for m in converted.modules())
