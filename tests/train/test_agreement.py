"""Agreement preflight: ranks refuse to start when the config (less ``launch``), the
units/BPE/CMVN files or the data lists differ, naming the rank, host and item.

(That ranks differing only in their ``launch`` sections start and train is shown by
tests/train/dist/test_world_scaling.py, whose 2-rank run gives each rank its own ``launch``.)
"""
from __future__ import annotations

import copy
import datetime
import hashlib
import shutil
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from asrkit.config import TrainConfig, to_dict
from asrkit.train import agreement as A
from asrkit.train.dist import DistContext
from tests.helpers import fork_ranks, free_port, spawn_ranks, train_args


def _base_config(tmp_path) -> dict:
    cfg = to_dict(TrainConfig())
    cfg["tokenizer_conf"]["symbol_table_path"] = str(tmp_path / "units.txt")
    return cfg


def _files(tmp_path, units="units.txt", train="train.list") -> dict:
    return {"units file": str(tmp_path / units), "BPE model": None, "train data list": str(tmp_path / train)}


def test_message_names_config_keys_files_and_extras(tmp_path):
    (tmp_path / "units.txt").write_text("<blank> 0\n<unk> 1\na 2\n")
    (tmp_path / "units_b.txt").write_text("<blank> 0\n<unk> 1\nb 2\n")
    (tmp_path / "train.list").write_text('{"key": "u1"}\n')
    cfg0 = _base_config(tmp_path)
    cfg1 = copy.deepcopy(cfg0)
    cfg1["optim_conf"]["lr"] = 0.002
    cfg1["tokenizer_conf"]["symbol_table_path"] = str(tmp_path / "units_b.txt")
    cfg1["launch"]["init_method"] = "tcp://10.0.0.1:1"  # launch may differ: never reported
    fp0 = dict(A.fingerprint(cfg0, _files(tmp_path), {"--max_steps": None}), rank=0, host="n0")
    fp1 = dict(A.fingerprint(cfg1, _files(tmp_path, units="units_b.txt"), {"--max_steps": 5}), rank=1, host="n1")
    msg = A.disagreement_message([fp0, fp1], [A.comparable_config(cfg0), A.comparable_config(cfg1)])
    assert "rank 1 (host n1) differs from rank 0 (host n0) in: " in msg
    assert "config key optim_conf.lr (rank 1: 0.002, rank 0: 0.001)" in msg
    assert f"units file (rank 1: {tmp_path}/units_b.txt (sha256 " in msg
    assert "--max_steps (rank 1: 5, rank 0: null)" in msg
    assert "launch" not in msg.split("(only the config's launch")[0] and "symbol_table_path" not in msg
    # same contents under another path and another launch section: agreement
    shutil.copy(tmp_path / "units.txt", tmp_path / "units_copy.txt")
    cfg2 = copy.deepcopy(cfg0)
    cfg2["launch"] = {"dist_backend": "gloo", "init_method": "file:///x", "timeout_s": 5.0}
    fp2 = dict(A.fingerprint(cfg2, _files(tmp_path, units="units_copy.txt"), {"--max_steps": None}), rank=1, host="n1")
    assert A.disagreement_message([fp0, fp2]) is None
    # a missing file on one rank
    fp3 = dict(A.fingerprint(cfg0, _files(tmp_path, train="nope.list"), {"--max_steps": None}), rank=1, host="n1")
    assert "train data list (rank 1: " in A.disagreement_message([fp0, fp3]) and "unreadable" in \
        A.disagreement_message([fp0, fp3])


def test_file_fingerprint_is_path_sha256_and_size_or_the_reason_it_is_unreadable(tmp_path):
    data = b"<blank> 0\n<unk> 1\n" * 100_000  # more than one read block
    (tmp_path / "units.txt").write_bytes(data)
    assert A.file_fingerprint(tmp_path / "units.txt") == {
        "path": str(tmp_path / "units.txt"), "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert A.file_fingerprint(None) is None and A.file_fingerprint("") is None
    missing = A.file_fingerprint(tmp_path / "nope.txt")
    assert missing["sha256"] is None and missing["bytes"] is None and "nope.txt" in missing["error"]


def test_job_files_follow_the_config():
    cfg = to_dict(TrainConfig())
    cfg["tokenizer_conf"]["symbol_table_path"] = "u.txt"
    cfg["tokenizer_conf"]["bpe_path"] = "bpe.model"
    cfg["cmvn"], cfg["cmvn_conf"]["cmvn_file"] = "global_cmvn", "cmvn.json"
    files = A.job_files(cfg, "train.list", "cv.list")
    assert files["units file"] == "u.txt" and files["CMVN file"] == "cmvn.json"
    assert files["BPE model"] is None  # tokenizer char: the bpe model is not used
    assert files["train data list"] == "train.list" and files["CV data list"] == "cv.list"


def test_ranks_whose_wenet_shard_indexes_differ_disagree(tiny_corpus, tmp_path, monkeypatch):
    """Three nodes hold byte-identical WeNet shard lists (relative tar paths) over their own
    tars: node 1 changed one transcript inside a tar, node 2 holds a plain copy of node 0's
    tars (other mtimes and inodes).  The lists agree everywhere; the index of node 1 does
    not, and its difference is named; the copy agrees.  Ranks failing identically (a tar
    missing on both) agree, and leave the error to the loaders; one failing alone does not."""
    from tests.data.audio_helpers import list_rows, write_wenet_shards
    rows = list_rows(tiny_corpus.splits["dev"].data_list)[:4]
    (tmp_path / "units.txt").write_text("<blank> 0\n<unk> 1\na 2\n")
    cfg = _base_config(tmp_path)
    fps = []
    for node, node_rows in (("n0", rows), ("n1", [dict(r, txt="oh") if i == 3 else r for i, r in enumerate(rows)])):
        (tmp_path / node).mkdir()
        monkeypatch.chdir(tmp_path / node)
        write_wenet_shards(node_rows, Path("shards"), Path("data.list"), per_tar=2)
        files = {**A.job_files(cfg, "data.list", None), **A.shard_indexes("data.list", None, None)}
        fps.append(dict(A.fingerprint(cfg, files), rank=len(fps), host=node))
    shutil.copytree(tmp_path / "n0", tmp_path / "n2", ignore=shutil.ignore_patterns("*.index.json"))
    monkeypatch.chdir(tmp_path / "n2")
    copy_fp = A.fingerprint(cfg, {**A.job_files(cfg, "data.list", None), **A.shard_indexes("data.list", None, None)})
    assert (tmp_path / "n2" / "data.list.index.json").is_file()  # (scanned there, not taken from n0's cache)
    assert fps[0]["files"]["train data list"] == fps[1]["files"]["train data list"]
    msg = A.disagreement_message(fps)
    assert "in: train shard index (rank 1: data.list.index.json (sha256 " in msg and "train data list" not in msg
    assert A.disagreement_message([fps[0], dict(copy_fp, rank=1, host="n2")]) is None

    (tmp_path / "n2" / "shards" / "shards_000000001.tar").unlink()
    broken = A.shard_indexes("data.list", None, None)["train shard index"]
    assert broken["sha256"] is None and "shards_000000001.tar does not exist" in broken["error"]
    both = [dict(A.fingerprint(cfg, {"train shard index": broken}), rank=r, host="n2") for r in (0, 1)]
    assert A.disagreement_message(both) is None
    alone = A.disagreement_message([fps[0], both[1]])
    assert "train shard index (rank 1: data.list (unreadable: data.list:2: shards/shards_000000001.tar does not " \
           "exist)" in alone


def _worker(rank, port, root, results):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    ctx = DistContext(rank=rank, world_size=2)
    from pathlib import Path
    root = Path(root)
    base = _base_config(root)
    scenarios = {
        "launch only": (lambda c: c["launch"].update(timeout_s=10.0 + rank), _files(root)),
        "lr": (lambda c: c["optim_conf"].update(lr=0.001 * (rank + 1)), _files(root)),
        "units": (lambda c: None, _files(root, units=f"units_r{rank}.txt")),
        "data list": (lambda c: None, _files(root, train=f"train_r{rank}.list")),
    }
    out = {}
    try:
        for name, (edit, files) in scenarios.items():
            cfg = copy.deepcopy(base)
            edit(cfg)
            try:
                A.check_agreement(ctx, cfg, files, {"--max_steps": None})
                out[name] = None
            except A.AgreementError as e:
                out[name] = str(e)
        try:
            A.agree_on(ctx, "the checkpoint to resume from", {"checkpoint": "step_4.pt" if rank == 0 else None})
            out["resume"] = None
        except A.AgreementError as e:
            out["resume"] = str(e)
        results[rank] = out
    finally:
        dist.destroy_process_group()


def test_two_ranks_refuse_naming_the_difference(tmp_path):
    (tmp_path / "units.txt").write_text("<blank> 0\n<unk> 1\na 2\n")
    (tmp_path / "units_r0.txt").write_text("<blank> 0\n<unk> 1\na 2\n")
    (tmp_path / "units_r1.txt").write_text("<blank> 0\n<unk> 1\nb 2\n")
    (tmp_path / "train.list").write_text('{"key": "u1"}\n')
    (tmp_path / "train_r0.list").write_text('{"key": "u1"}\n')
    (tmp_path / "train_r1.list").write_text('{"key": "u2"}\n')
    results = mp.Manager().dict()
    spawn_ranks(_worker, (free_port(), str(tmp_path), results))
    for rank in (0, 1):  # every rank refuses, with the same message
        r = results[rank]
        assert r["launch only"] is None
        assert "rank 1 (host " in r["lr"] and "config key optim_conf.lr (rank 1: 0.002, rank 0: 0.001)" in r["lr"]
        assert "in: units file (rank 1: " in r["units"] and "units_r1.txt" in r["units"]
        assert "in: train data list (rank 1: " in r["data list"]
        assert "ranks disagree on the checkpoint to resume from" in r["resume"]
        assert '"checkpoint":"step_4.pt"' in r["resume"] and '"checkpoint":null' in r["resume"]
    assert results[0] == results[1]


@pytest.mark.parametrize("engine", ["torch_ddp", "torch_fsdp"])
def test_train_refuses_ranks_with_different_config_units_and_data(tiny_experiment, tmp_path, engine):
    """Two `asrkit.bin.train` processes (legacy shell-loop launch): rank 1 has another lr, a
    units file with other contents and another train list; both exit 2 naming all three --
    under either engine (torch_fsdp: rank 1 also shards differently, named too)."""
    cfg = tiny_experiment.config(tmp_path / "c.yaml", train_engine=engine)
    units1 = tmp_path / "units1.txt"
    units = tiny_experiment.units.read_text()
    units1.write_text(units + f"extra {len(units.splitlines())}\n")  # a valid table, one unit more
    train1 = tmp_path / "train1.list"
    train1.write_text("".join(tiny_experiment.corpus.splits["train"].data_list.read_text().splitlines(True)[:-1]))
    argvs = [train_args(tiny_experiment, tmp_path / "exp", cfg),
             train_args(tiny_experiment, tmp_path / "exp", cfg, train_list=train1)
             + ["--override", "optim_conf.lr=0.004", "--override", f"tokenizer_conf.symbol_table_path={units1}"]
             + (["--fsdp_sharding_strategy", "zero3"] if engine == "torch_fsdp" else [])]
    results = fork_ranks(argvs, timeout=120)
    assert [r[0] for r in results] == [2, 2], results
    outs = [(o, e) for _, o, e in results]
    err = outs[0][1]
    assert "ranks disagree on what must be identical in one job; refusing to start" in err
    assert "rank 1 (host " in err and "differs from rank 0" in err
    assert "config key optim_conf.lr (rank 1: 0.004, rank 0: 0.002)" in err
    assert f"units file (rank 1: {units1} (sha256 " in err
    assert "train data list (rank 1: " in err
    if engine == "torch_fsdp":
        assert "config key fsdp_sharding_strategy (rank 1: \"zero3\", rank 0: \"zero2\")" in err, err
    assert not list((tmp_path / "exp").glob("*.pt")) and not (tmp_path / "exp" / "train.yaml").exists()
