"""Executor semantics: accumulation equals a bigger batch, non-finite steps, epoch-end groups."""
from __future__ import annotations

import copy

import pytest
import torch

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.models import build_model
from asrkit.train.dist import DistContext
from asrkit.train.executor import Executor, NonFiniteError, TrainState
from asrkit.train.scheduler import build_optimizer, build_scheduler
from tests.helpers import concat_batches, random_batch, tiny_config_dict, train_here
from asrkit.text.vocabulary import Vocabulary
from asrkit.models.asr_model import AsrModel
from asrkit.models.chunks import FULL_CONTEXT, draw
from asrkit import checkpoint as ckpt
from tests.train.chunk_recorder import read_records, recording_encode

VOCAB = 10


def make(tmp_path, **top):
    cfg = build(TrainConfig, tiny_config_dict(**top))
    torch.manual_seed(0)
    model = build_model(cfg, 80, Vocabulary.of_size(VOCAB))
    opt = build_optimizer(cfg, model.parameters())
    sched = build_scheduler(cfg, opt)
    return cfg, model, Executor(cfg, model, opt, sched, DistContext(), tmp_path, progress=False)


def params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def snapshot_grads(executor) -> list:
    """Record the (normalised, clipped) gradients each optimizer step applies."""
    seen = []
    executor.optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: seen.append(torch.cat([p.grad.flatten() for p in executor.params])))
    return seen


def logged_norms(executor, batches, state, after_step1: dict, name: str, model) -> list:
    """Train ``batches``; the ``(step, grad_norm)`` of each step's log line (the numbers its
    ``StepResult`` carries for TensorBoard), and ``after_step1[name]``: the weights after step 1."""
    norms = []
    for result in executor.steps(batches, state):
        after_step1.setdefault(name, params(model).clone())
        norms.append((state.step, result.scalars["grad_norm"]))
    return norms


def test_accum_grad_2_equals_double_batch(tmp_path):
    """Two optimizer steps: micro-batches [b1, b2] [b3, b4] with accum_grad 2 against the
    concatenated batches b1+b2, b3+b4.  Utterances differ in length and the clip is
    unreachable (grad_clip 1e9), so a wrong normaliser or a lost micro-batch changes the
    applied gradients and the logged pre-clip norms of both steps."""
    gen = torch.Generator().manual_seed(1)
    b1, b2, b3, b4 = (random_batch(gen, n, vocab=VOCAB) for n in (3, 2, 3, 4))
    _, m_acc, ex_acc = make(tmp_path, accum_grad=2, grad_clip=1e9)
    _, m_big, ex_big = make(tmp_path, accum_grad=1, grad_clip=1e9)
    assert torch.equal(params(m_acc), params(m_big))
    g_acc, g_big = snapshot_grads(ex_acc), snapshot_grads(ex_big)
    after_step1 = {}
    s1, s2 = TrainState(), TrainState()
    norms_acc = logged_norms(ex_acc, [b1, b2, b3, b4], s1, after_step1, "acc", m_acc)
    norms_big = logged_norms(ex_big, [concat_batches(b1, b2), concat_batches(b3, b4)], s2, after_step1, "big", m_big)
    assert s1.step == s2.step == 2 and len(g_acc) == len(g_big) == 2
    torch.testing.assert_close(g_acc[0], g_big[0], rtol=1e-4, atol=1e-7)
    # step 2 starts from weights that differ by step 1's float noise (measured: 2e-6 at most, of gradients up to 2.7)
    torch.testing.assert_close(g_acc[1], g_big[1], rtol=1e-4, atol=2e-5)
    assert [s for s, _ in norms_acc] == [s for s, _ in norms_big] == [1, 2]
    for (_, a), (_, b), g in zip(norms_acc, norms_big, g_acc):
        assert a == pytest.approx(b, rel=1e-5)
        assert a == pytest.approx(float(g.norm()), rel=1e-5)  # the logged norm is the applied one (no clip)
    # Adam's first update is ~lr·sign(g): weights agree to well under one step where the gradient
    # stands above float noise; where it is ~0 its sign is the noise's (it flipped one weight of
    # 77,748 on an AMX Xeon), and Adam bounds any update by lr.  (The gradients above are the real check.)
    lr = ex_acc.optimizer.param_groups[0]["initial_lr"] * 10 ** 0.5 * 10 ** -1.5
    diff = (after_step1["acc"] - after_step1["big"]).abs()
    assert float(diff.max()) <= 2 * lr
    assert float(diff[g_big[0].abs() > 1e-5].max()) <= 0.5 * lr


def test_steps_after_every_accum_group_and_at_epoch_end(tmp_path):
    gen = torch.Generator().manual_seed(2)
    batches = [random_batch(gen, 2, vocab=VOCAB) for _ in range(5)]
    _, _, ex = make(tmp_path, accum_grad=2)
    lrs = []
    state = TrainState()

    def on_step(s):
        lrs.append(ex.optimizer.param_groups[0]["lr"])
        return False

    assert ex.train_epoch(batches, state, on_step=on_step)
    assert state.step == 3  # groups [0,1] [2,3] and the unfinished [4]
    assert len(lrs) == 3 and lrs[0] < lrs[1] < lrs[2]  # the scheduler moved once per real step


def test_nonfinite_step_skipped_without_touching_weights(tmp_path):
    gen = torch.Generator().manual_seed(3)
    good = random_batch(gen, 2, vocab=VOCAB)
    bad = copy.deepcopy(good)
    bad["feats"][0, 0, 0] = float("nan")
    _, model, ex = make(tmp_path, max_nonfinite_steps=3)
    before = params(model).clone()
    opt_state = copy.deepcopy(ex.optimizer.state_dict())
    state = TrainState()
    ex.train_epoch([bad], state)
    assert state.step == 0 and state.nonfinite_total == 1
    assert torch.equal(params(model), before)
    assert ex.optimizer.state_dict()["state"] == opt_state["state"] == {}
    ex.train_epoch([good], state)
    assert state.step == 1 and state.nonfinite_in_row == 0
    with pytest.raises(NonFiniteError, match="3 optimizer steps in a row"):
        ex.train_epoch([bad, bad, bad], state)
    saved = list(tmp_path.glob("nonfinite_step1_rank0.pt"))
    assert saved and torch.load(saved[0], weights_only=True)[0]["keys"] == bad["keys"]


def test_cv_reports_per_utterance_loss(tmp_path):
    gen = torch.Generator().manual_seed(4)
    b1, b2 = random_batch(gen, 2, vocab=VOCAB), random_batch(gen, 3, vocab=VOCAB)
    _, _, ex = make(tmp_path)
    split = ex.cv([b1, b2])
    joined = ex.cv([concat_batches(b1, b2)])
    assert split["num_utts"] == joined["num_utts"] == 5
    assert split["loss"] == pytest.approx(joined["loss"], rel=1e-5)


# ----------------------------------------------------------------------------- chunk choices


def streaming_encoder(**keys) -> dict:
    return {**tiny_config_dict()["encoder_conf"], "causal": True, **keys}


def test_each_micro_batch_trains_with_its_drawn_chunk_and_cv_with_full_context(tmp_path, monkeypatch):
    """accum_grad 2, 5 micro-batches on one rank: the micro-batch at position p, in the group
    that step s applies, trains with draw(seed, s, p mod 2); a skipped non-finite step does not
    move s; CV runs with full context."""
    monkeypatch.setattr(AsrModel, "encode", recording_encode(tmp_path / "chunks.jsonl"))
    gen = torch.Generator().manual_seed(5)
    batches = [random_batch(gen, 2, vocab=VOCAB) for _ in range(5)]
    bad = copy.deepcopy(batches[0])
    bad["feats"][0, 0, 0] = float("nan")
    _, _, ex = make(tmp_path, accum_grad=2, seed=5,
                    encoder_conf=streaming_encoder(use_dynamic_chunk=True, use_dynamic_left_chunk=True))
    state = TrainState()
    ex.train_epoch([bad], state)  # step 0 skipped: the next group draws step 0's choices again
    assert state.step == 0 and state.nonfinite_total == 1
    ex.train_epoch(batches, state)
    ex.cv(batches[:2])
    records = read_records(tmp_path / "chunks.jsonl")
    trained = [tuple(r["chunk"]) for r in records if r["training"]]
    expected = [draw(5, 0, 0, True)] + [draw(5, s, i, True) for s, i in ((0, 0), (0, 1), (1, 0), (1, 1), (2, 0))]
    assert trained == expected
    assert len(set(expected)) >= 3 and FULL_CONTEXT in expected and any(c[1] >= 0 for c in expected)
    assert [tuple(r["chunk"]) for r in records if not r["training"]] == [FULL_CONTEXT] * 2


def test_static_chunk_in_training_and_cv(tmp_path, monkeypatch):
    monkeypatch.setattr(AsrModel, "encode", recording_encode(tmp_path / "chunks.jsonl"))
    gen = torch.Generator().manual_seed(6)
    batches = [random_batch(gen, 2, vocab=VOCAB) for _ in range(3)]
    _, _, ex = make(tmp_path, accum_grad=2, encoder_conf=streaming_encoder(static_chunk_size=4))
    ex.train_epoch(batches, TrainState())
    ex.cv(batches[:1])
    assert [(r["training"], tuple(r["chunk"])) for r in read_records(tmp_path / "chunks.jsonl")] == \
        [(True, (4, -1))] * 3 + [(False, (4, -1))]


@pytest.mark.slow
def test_resume_mid_epoch_draws_what_the_uninterrupted_run_draws(tiny_experiment, tmp_path, monkeypatch):
    """Dynamic chunks with dynamic left chunks, accum_grad 2, stopped after step 3 (position 6
    of 12) and resumed with --checkpoint auto: every micro-batch trains on the same
    utterances with the same chunk choice as in the uninterrupted run, and the final weights
    are equal."""
    cfg = tiny_experiment.config(
        tmp_path / "c.yaml", accum_grad=2, save_interval=1,
        encoder_conf={"use_dynamic_chunk": True, "use_dynamic_left_chunk": True, "causal": True},
        dataset_conf={"batch_conf": {"batch_size": 4}})
    full, parted = tmp_path / "full", tmp_path / "parted"
    monkeypatch.setattr(AsrModel, "encode", recording_encode(tmp_path / "full.jsonl"))
    train_here(tiny_experiment, full, cfg)
    monkeypatch.setattr(AsrModel, "encode", recording_encode(tmp_path / "parted.jsonl"))
    first = train_here(tiny_experiment, parted, cfg, "--max_steps", 3)
    assert "reached max_steps=3" in first.stderr
    second = train_here(tiny_experiment, parted, cfg, "--checkpoint", "auto")
    assert "resumed from" in second.stderr and "(mid-epoch)" in second.stderr

    def trained(name):
        return [(tuple(r["chunk"]), r["utts"]) for r in read_records(tmp_path / name) if r["training"]]

    assert len(trained("full.jsonl")) == 12 and trained("parted.jsonl") == trained("full.jsonl")
    chunks_drawn = {c for c, _ in trained("full.jsonl")}
    assert FULL_CONTEXT in chunks_drawn and any(left >= 0 for _, left in chunks_drawn), chunks_drawn
    a, b = (ckpt.load_checkpoint(d / "epoch_0.pt")["model"] for d in (full, parted))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6, msg=k)
