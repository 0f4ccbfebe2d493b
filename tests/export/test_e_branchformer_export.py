"""An E-Branchformer model (``encoder: e_branchformer``) through the exporters: the TorchScript
archive equals eager asrkit (every decoding mode; for a causal model also the WeNet-runtime
``forward_encoder_chunk`` driven chunk by chunk, against eager ``forward_chunk_by_chunk``);
the offline ONNX export passes its own check against eager; the streaming ONNX export is
refused in one line (``tests/export/test_onnx.py`` checks that refusal for both layouts)."""
from __future__ import annotations

import pytest
from tests.export.encoder_export_checks import check_onnx_offline_only, check_torchscript, tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_e_branchformer(causal: bool):
    return tiny_model("e_branchformer", {
        "output_size": 16, "attention_heads": 2, "linear_units": 24, "cgmlp_linear_units": 16, "cgmlp_conv_kernel": 3,
        "num_blocks": 2, "causal": causal, "use_dynamic_chunk": causal})


@pytest.mark.parametrize("causal", [False, True])
def test_torchscript_archive_equals_eager(causal):
    check_torchscript(tiny_e_branchformer(causal), streaming=causal)


def test_offline_onnx_export_checks_and_streaming_is_refused(tmp_path):
    model = tiny_e_branchformer(True)
    check_onnx_offline_only(model, model, "e_branchformer", tmp_path)
