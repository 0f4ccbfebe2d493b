"""Dynamic- and static-chunk training choices (``asrkit.models.chunks``) and their config keys."""
from __future__ import annotations

import collections
import hashlib

import pytest
import torch

from asrkit.config import TrainConfig

from asrkit.schema import build, check_all
from asrkit.models import chunks
from asrkit.models.chunks import FULL_CONTEXT, ChunkTraining, draw, micro_batch_index


def test_draw_is_the_documented_hash_rule():
    """The module docstring's definition, computed here from SHA-256 directly."""
    for seed, step, index in [(777, 0, 0), (777, 0, 1), (777, 41, 3), (1, 123456, 7), (0, 5, 2)]:
        digest = hashlib.sha256(f"asrkit-chunk {seed} {step} {index}".encode()).digest()
        w0, w1, w2 = (int.from_bytes(digest[i:i + 8], "big") for i in (0, 8, 16))
        if w0 % 2 == 0:
            expected_left = expected_plain = (0, -1)
        else:
            chunk = 1 + w1 % 25
            expected_plain, expected_left = (chunk, -1), (chunk, w2 % (124 // chunk))
        assert draw(seed, step, index, dynamic_left=False) == expected_plain
        assert draw(seed, step, index, dynamic_left=True) == expected_left


def test_draw_distribution_is_wenets_intent():
    """About half full context; else chunks uniform in 1..25; left chunks uniform in
    0 .. (125 − 1) // chunk − 1 (WeNet's rule with max_len = 125)."""
    n = 20000
    draws = [draw(777, step, index, dynamic_left=True) for step in range(n // 4) for index in range(4)]
    full = sum(d == FULL_CONTEXT for d in draws)
    assert abs(full / n - 0.5) < 0.015
    chunked = [d for d in draws if d != FULL_CONTEXT]
    sizes = collections.Counter(c for c, _ in chunked)
    assert sorted(sizes) == list(range(1, 26))
    assert all(abs(k / len(chunked) - 1 / 25) < 0.01 for k in sizes.values())
    lefts: dict = collections.defaultdict(set)
    for c, left in chunked:
        lefts[c].add(left)
    for c in (4, 5, 16, 25):
        assert lefts[c] == set(range((chunks.LEFT_REFERENCE_FRAMES - 1) // c)), c
    assert {left for c, left in (draw(777, s, 0, dynamic_left=False) for s in range(200))} == {-1}


def test_draw_reads_no_generator_state():
    """Nothing rank-local or stateful: torch's global generator is neither read nor moved."""
    torch.manual_seed(0)
    first = [draw(777, s, 0, True) for s in range(50)]
    state = torch.get_rng_state()
    torch.manual_seed(123)
    assert [draw(777, s, 0, True) for s in range(50)] == first
    torch.manual_seed(0)
    assert torch.equal(torch.get_rng_state(), state)
    assert len(set(first)) > 10 and [draw(778, s, 0, True) for s in range(50)] != first  # the seed matters


@pytest.mark.parametrize("world, accum", [(1, 4), (2, 2), (4, 1), (1, 6), (3, 2), (6, 1)])
def test_micro_batch_index_is_the_plan_batch_place_in_the_global_group(world, accum):
    """Rank r trains plan batches r, r + W, ... (asrkit.data.sampler): plan batch j is trained
    in group j // (W·A) with index j mod (W·A), whichever W and A make that product -- so
    the same data gets the same chunk choice on 1 rank x accum 4 and 2 ranks x accum 2."""
    for rank in range(world):
        for position in range(5 * accum):
            plan_batch = position * world + rank
            group = position // accum
            assert plan_batch // (world * accum) == group
            assert micro_batch_index(position, accum, rank, world) == plan_batch % (world * accum)


def test_choices_of_each_mode():
    dynamic = ChunkTraining(use_dynamic_chunk=True, use_dynamic_left_chunk=True, seed=5)
    assert [dynamic.for_training(s, i) for s in range(3) for i in range(2)] == \
        [draw(5, s, i, True) for s in range(3) for i in range(2)]
    assert dynamic.for_evaluation() == FULL_CONTEXT
    no_left = ChunkTraining(use_dynamic_chunk=True, seed=5)
    assert {no_left.for_training(s, 0)[1] for s in range(40)} == {-1}
    static = ChunkTraining(static_chunk_size=8, seed=5)
    assert static.for_training(3, 1) == static.for_evaluation() == (8, -1)
    off = ChunkTraining(seed=5)
    assert off.for_training(3, 1) == off.for_evaluation() == FULL_CONTEXT


def test_from_config_reads_the_encoder_keys_and_the_seed():
    cfg = build(TrainConfig, {"seed": 11, "encoder_conf": {"use_dynamic_chunk": True, "use_dynamic_left_chunk": True}})
    assert ChunkTraining.from_config(cfg) == ChunkTraining(True, True, 0, 11)
    cfg = build(TrainConfig, {"encoder_conf": {"static_chunk_size": 16}})
    assert ChunkTraining.from_config(cfg) == ChunkTraining(False, False, 16, 777)


# ----------------------------------------------------------------------------- config keys


def test_streaming_keys_are_fields_with_wenets_meaning():
    conf = build(TrainConfig, {"encoder_conf": {"use_dynamic_chunk": True, "use_dynamic_left_chunk": True,
                                                "causal": True, "cnn_module_norm": "layer_norm"}}).encoder_conf
    assert conf.use_dynamic_chunk and conf.use_dynamic_left_chunk and conf.static_chunk_size == 0
    # (WeNet: a value <= 0 is no static chunk; its Whisper converter writes -1)
    training = ChunkTraining.from_config(build(TrainConfig, {"encoder_conf": {"static_chunk_size": -1}}))
    assert not training.chunked and training.for_training(3, 0) == training.for_evaluation() == FULL_CONTEXT


@pytest.mark.parametrize("streaming", [{"use_dynamic_chunk": True}, {"static_chunk_size": 16}])
def test_every_positional_encoding_may_stream(streaming):
    """Transformer-XL positions stream exactly (tests/models/test_encoder_chunk.py), so no
    positional encoding is refused with the streaming keys."""
    for pos in ("rel_pos", "rel_pos_xl", "abs_pos"):
        attention = {} if pos == "abs_pos" else {"selfattention_layer_type": "rel_selfattn"}
        assert check_all(TrainConfig, {"encoder_conf": {"pos_enc_layer_type": pos, **attention, **streaming}}) == []


def test_combinations_wenet_ignores_are_refused():
    assert check_all(TrainConfig, {"encoder_conf": {"use_dynamic_left_chunk": True}}) == [
        "encoder_conf.use_dynamic_left_chunk: true needs use_dynamic_chunk: true (WeNet ignores it without; "
        "leave it false)"]
    assert check_all(TrainConfig, {"encoder_conf": {"use_dynamic_chunk": True, "static_chunk_size": 8}}) == [
        "encoder_conf.static_chunk_size: 8 with use_dynamic_chunk: true (WeNet ignores the static chunk then); "
        "set one of them"]
