"""Item 6 -- numerical faults: an injected inf/NaN loss skips that optimizer step (counted)
without touching weights, optimizer or scheduler state; repeated faults stop the run with
the offending batch saved.  With DDP, a non-finite loss on one rank makes every rank skip
the same step (the count travels in the per-step all-reduce)."""
from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist

from asrkit.config import TrainConfig

from asrkit.schema import build
from asrkit.models import build_model
from asrkit.train.dist import DistContext
from asrkit.train.executor import Executor, NonFiniteError, TrainState
from asrkit.train.scheduler import build_optimizer, build_scheduler
from tests.helpers import fork_server_context, free_port, random_batch, tiny_config_dict
from asrkit.text.vocabulary import Vocabulary

VOCAB = 10


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread, as each training process of this 2-core machine uses: OpenMP
    threads that share busy cores stall each other (10x slower steps)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class InjectLoss(torch.nn.Module):
    """Wraps the model; the i-th forward call gets a non-finite loss when ``faults[i]``:
    ``nan`` multiplies the loss by NaN (NaN gradients too), ``inf`` adds +inf (the
    gradients stay finite: only the loss shows the fault)."""

    def __init__(self, inner: torch.nn.Module, kind: str, faults: list[bool]):
        super().__init__()
        self.inner, self.kind, self.faults = inner, kind, list(faults)
        self.length_normalized_loss = getattr(inner, "length_normalized_loss", False)

    def forward(self, *args):
        out = self.inner(*args)
        if self.faults and self.faults.pop(0):
            out = dict(out, loss=out["loss"] * float("nan") if self.kind == "nan" else out["loss"] + float("inf"))
        return out


def make(tmp_path, kind="nan", faults=(), ctx=None, **top):
    cfg = build(TrainConfig, tiny_config_dict(**top))
    torch.manual_seed(0)
    model = InjectLoss(build_model(cfg, 80, Vocabulary.of_size(VOCAB)), kind, list(faults))
    opt = build_optimizer(cfg, model.parameters())
    sched = build_scheduler(cfg, opt)
    return Executor(cfg, model, opt, sched, ctx or DistContext(), tmp_path, progress=False)


def snapshot(ex: Executor) -> dict:
    return {"params": [p.detach().clone() for p in ex.model.parameters()],
            "optimizer": ex.optimizer.state_dict(), "scheduler": ex.scheduler.state_dict()}


def assert_same_state(a: dict, b: dict) -> None:
    assert all(torch.equal(x, y) for x, y in zip(a["params"], b["params"]))
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for name in sa[k]:
            assert torch.equal(torch.as_tensor(sa[k][name]), torch.as_tensor(sb[k][name])), (k, name)
    assert a["scheduler"] == b["scheduler"]


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_nonfinite_loss_step_is_skipped_and_counted_without_touching_state(tmp_path, kind):
    gen = torch.Generator().manual_seed(5)
    good1, bad, good2 = (random_batch(gen, 3, vocab=VOCAB) for _ in range(3))
    faulty = make(tmp_path, kind, faults=[False, True, False])
    clean = make(tmp_path)
    s_faulty, s_clean = TrainState(), TrainState()
    faulty_steps = list(faulty.steps([good1, bad, good2], s_faulty))
    clean_steps = list(clean.steps([good1, good2], s_clean))
    assert (s_faulty.step, s_faulty.nonfinite_total, s_faulty.nonfinite_in_row) == (2, 1, 0)
    assert s_clean.step == 2 and s_clean.nonfinite_total == 0
    # the faulty step left no trace: the run equals one that never saw the bad batch
    assert_same_state(snapshot(faulty), snapshot(clean))
    assert [r.utterances for r in faulty_steps] == [3, 0, 3] and [r.utterances for r in clean_steps] == [3, 3]


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_repeated_faults_stop_with_the_offending_batch_saved(tmp_path, kind):
    gen = torch.Generator().manual_seed(6)
    good, *bad = (random_batch(gen, 2, vocab=VOCAB) for _ in range(4))
    ex = make(tmp_path, kind, faults=[False, True, True, True], max_nonfinite_steps=3)
    state = TrainState()
    with pytest.raises(NonFiniteError, match="3 optimizer steps in a row were not finite") as err:
        ex.train_epoch([good, *bad], state)
    what = "is not finite" if kind == "inf" else "not finite"
    assert what in str(err.value) and "nonfinite_step1_rank0.pt" in str(err.value)
    assert (state.step, state.nonfinite_total) == (1, 3)
    saved = torch.load(tmp_path / "nonfinite_step1_rank0.pt", weights_only=True)
    assert saved[0]["keys"] == bad[-1]["keys"] and torch.equal(saved[0]["feats"], bad[-1]["feats"])


def _rank_worker(rank, port, tmp, queue):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        torch.set_num_threads(1)
        ctx = DistContext(rank=rank, world_size=2)
        gen = torch.Generator().manual_seed(10 + rank)
        batches = [random_batch(gen, 2, vocab=VOCAB) for _ in range(2)]
        # only rank 1's second batch has an infinite loss; its gradients are finite
        ex = make(tmp, "inf", faults=[False, rank == 1], ctx=ctx)
        ex.model = torch.nn.parallel.DistributedDataParallel(ex.model)
        state = TrainState()
        ex.train_epoch(batches, state)
        flat = torch.cat([p.detach().flatten() for p in ex.model.parameters()])
        queue.put((rank, state.step, state.nonfinite_total, flat.tolist()))  # (a tensor would need the sender alive)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_a_fault_on_one_rank_makes_every_rank_skip_the_step(tmp_path):
    ctx = fork_server_context()
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_worker, args=(r, port, tmp_path, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0, 0]
    (r0, step0, faults0, w0), (r1, step1, faults1, w1) = results
    assert (step0, faults0) == (step1, faults1) == (1, 1)  # both took step 1 and both skipped step 2
    assert w0 == w1                                       # the replicas stayed identical
