"""``compile_blocks: true`` (issue 57, item 4): regional torch.compile of the encoder and
decoder blocks gives the loss and gradients of the eager model on the CPU, keeps the
parameter names (checkpoints), and is off by default.  The GPU check measures whether it
pays (bench/gpu_stages/first_epoch.py)."""
from __future__ import annotations

import copy
import time

import pytest

from asrkit.train.compile import compile_blocks, model_blocks
from tests.models.tiny import random_batch, tiny_config, tiny_model

# inductor (C++ codegen) took 199 s for this tiny model on the shared 2-core CPU: the test uses
# aot_eager (dynamo's trace and AOTAutograd's joint graph, no code generation), which checks what
# regional compilation changes -- the traced blocks, their backward, the parameter names
BACKEND = "aot_eager"


def loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    out = model(*batch)
    out["loss"].backward()
    return out["loss"].detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_off_by_default_and_the_blocks_it_compiles():
    assert tiny_config().compile_blocks is False
    model = tiny_model(decoder="bitransformer", decoder_conf={"r_num_blocks": 1},
                       model_conf={"ctc_weight": 0.3, "reverse_weight": 0.3})
    names = [name for name, _ in model_blocks(model)]
    assert names == ["encoder.encoders.0", "encoder.encoders.1", "decoder.left_decoder.decoders.0",
                     "decoder.left_decoder.decoders.1", "decoder.right_decoder.decoders.0"]


def test_compiled_blocks_give_the_eager_loss_on_the_cpu():
    try:
        import torch._inductor  # noqa: F401  (defer: the compiler is needed by this test only)
    except Exception as e:  # pragma: no cover - a torch without inductor
        pytest.skip(f"torch.compile's inductor does not import here: {e}")
    model = tiny_model(encoder_conf={"num_blocks": 1}, decoder_conf={"num_blocks": 1})  # (the compile's time)
    model.train()
    batch = random_batch([37, 23, 30, 18], target_lengths=[4, 2, 5, 3])
    eager_loss, eager_grads = loss_and_grads(model, batch)
    compiled = copy.deepcopy(model)
    keys = list(compiled.state_dict())
    start = time.perf_counter()
    assert compile_blocks(compiled, backend=BACKEND) == 2
    try:
        loss, grads = loss_and_grads(compiled, batch)
    except Exception as e:  # a CPU without a working C++ toolchain for inductor
        pytest.skip(f"torch.compile is unusable on this CPU ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
    assert list(compiled.state_dict()) == keys  # checkpoints unchanged
    torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-5)
    assert grads.keys() == eager_grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, eager_grads[name], rtol=1e-4, atol=1e-5, msg=name)
    print(f"compiled first step: {time.perf_counter() - start:.1f} s ({BACKEND})")
