"""``asrkit doctor`` on a toy recipe directory (the digits recipe's ``conf/train_toy.yaml``
with the tiny corpus' lists, units and CMVN at the paths the recipe uses).

Single-node runs are in-process (``asrkit.bin.cli.main`` / ``asrkit.bin.doctor.main`` in
the recipe directory: they form no process group); multi-node runs are two real processes
on loopback meeting at a free port, with gloo between them.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bin.doctor_helpers import FAST, JOB, SOCKET_VARS, doctor_env, lines_of, make_recipe
from tests.helpers import free_port

pytestmark = pytest.mark.usefixtures("restore_threads")
TIMEOUT = 120


@pytest.fixture(scope="module")
def recipe(tmp_path_factory, tiny_corpus, tiny_experiment) -> Path:
    return make_recipe(tmp_path_factory.mktemp("doctor") / "digits s0", tiny_corpus, tiny_experiment)


@pytest.fixture
def in_recipe(recipe, monkeypatch):
    """Run in-process in the recipe directory, without the socket variables of this shell."""
    monkeypatch.chdir(recipe)
    for var in (*SOCKET_VARS, "TORCH_CPP_LOG_LEVEL"):  # (restored afterwards, whatever the doctor set)
        monkeypatch.delenv(var, raising=False)
    return recipe


def start_node(recipe: Path, rank: int, port: int, *extra: str, env: dict | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "asrkit.bin.doctor", *JOB, "--num_nodes", "2",
            "--node_rank", str(rank), "--master_addr", "127.0.0.1", "--master_port", str(port), "--timeout_s", "60",
            *FAST, *extra]
    return subprocess.Popen(argv, cwd=recipe, env=env or doctor_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(procs: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=TIMEOUT)
            out.append((p.returncode, o, e))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    return out


def test_single_node_all_ok_through_the_asrkit_command(in_recipe, capsys):
    from asrkit.bin.cli import main
    code = main(["doctor", *JOB, "--master_port", str(free_port())])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines and all(line.startswith("OK ") for line in lines), out
    for expected in ("OK versions: python ", "OK network: the route to the master 127.0.0.1 (127.0.0.1) uses lo",
                     "OK config: conf/train_toy.yaml loaded", "OK files: units data/dict/units.txt",
                     "CMVN data/train/global_cmvn (80 dims)",
                     "OK files: train data list data/train/data.list: 48 entries",
                     "OK files: CV data list data/dev/data.list: 12 entries", "audio of the first 3 readable",
                     "is free on this host", "OK allreduce: single node"):
        assert expected in out, out
    assert "0 WARN, 0 FAIL" in err


def test_missing_data_file_is_a_fail_line_and_exit_2(in_recipe, capsys):
    from asrkit.bin.doctor import main
    code = main([*JOB, "--cv_data", "data/test/data.list",
                 "--master_port", str(free_port())])
    out, err = capsys.readouterr()
    assert code == 2
    fails = lines_of(out, "FAIL")
    assert fails == ["FAIL files: --cv_data data/test/data.list: file not found -> prepare the data on this node "
                     "(bash run.sh --stage 0 --stop_stage 3 with the same options), or run the doctor from the "
                     "recipe directory with the paths the recipe passes"], out
    assert "OK files: train data list" in out and "Traceback" not in err


def test_unreadable_audio_names_the_entry(in_recipe, tmp_path, capsys):
    from asrkit.bin.doctor import main
    first, *rest = (in_recipe / "data" / "dev" / "data.list").read_text().splitlines()
    moved = first.replace('"wav": "', f'"wav": "{tmp_path}/gone/')
    listed = tmp_path / "dev.list"
    listed.write_text("\n".join([moved, *rest]) + "\n")
    code = main([*JOB, "--cv_data", str(listed), "--master_port", str(free_port())])
    out, _ = capsys.readouterr()
    assert code == 2
    [line] = lines_of(out, "FAIL")
    assert line.startswith(f"FAIL files: CV data list {listed}: the audio of entry ") and "/gone/" in line, line
    assert "-> copy the corpus to the same path on this node" in line


def test_nonexistent_gloo_socket_ifname_names_the_interface_to_use(in_recipe, monkeypatch, capsys):
    from asrkit.bin.doctor import main
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "akbogus0")
    code = main([*JOB, "--master_port", str(free_port())])
    out, _ = capsys.readouterr()
    assert code == 2
    [line] = lines_of(out, "FAIL")
    assert line.startswith("FAIL network: GLOO_SOCKET_IFNAME=akbogus0 names no interface of this host"), line
    assert "lo: 127.0.0.1" in line  # the addresses seen
    assert line.endswith("-> export GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo (on this node, before the recipe)")


def test_unreachable_master_fails_within_the_timeout(in_recipe, capsys):
    from asrkit.bin.doctor import main
    port = free_port()  # (nothing listens there: node 0 never starts)
    code = main([*JOB, "--num_nodes", "2", "--node_rank", "1",
                 "--master_port", str(port), "--timeout_s", "2"])
    out, _ = capsys.readouterr()
    assert code == 2
    [line] = lines_of(out, "FAIL")
    assert line.startswith(f"FAIL master port: 127.0.0.1 port {port} did not accept a connection within 2 s "
                           f"(last attempt: Connection refused) -> start asrkit doctor --node_rank 0 on node 0"), line
    assert "allreduce" not in out
    # the loopback master is a warning on this node too, whatever became of the port
    assert lines_of(out, "WARN") == ["WARN master port: master_addr 127.0.0.1 is a loopback address (127.0.0.1): only "
                                     "nodes on this same machine can reach it -> on a cluster pass node 0's IP "
                                     "address on the network the nodes share"]


def test_the_job_is_the_recipes_when_not_given(in_recipe, capsys):
    """Run in the recipe directory with no --config/--train_data/--cv_data: its run.sh's
    train_config (not the default one, conf/train_conformer.yaml) and its lists."""
    from asrkit.bin.doctor import main
    code = main(["--master_port", str(free_port())])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert ("doctor: the recipe's run.sh gives --config conf/train_toy.yaml --train_data data/train/data.list "
            "--cv_data data/dev/data.list") in err
    assert "OK config: conf/train_toy.yaml loaded" in out and "OK files: CV data list data/dev/data.list" in out


def test_outside_a_recipe_the_missing_options_are_one_error_line(in_recipe, tmp_path, monkeypatch, capsys):
    from asrkit.bin.doctor import main
    monkeypatch.chdir(tmp_path)
    assert main(["--train_data", "t.list"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"error: --config, --cv_data not given and there is no run.sh in {tmp_path} to read "
                                 f"the recipe's values from (run the doctor in the recipe directory): pass --config "
                                 f"conf/X.yaml (the recipe's train_config) --cv_data data/dev/data.list\n")


def test_the_master_comes_from_the_environment_unless_given(in_recipe, monkeypatch, capsys):
    from asrkit.bin.doctor import main
    port, other = free_port(), free_port()
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", str(port))
    code = main([*JOB, "--num_nodes", "2", "--node_rank", "1", "--timeout_s", "1"])
    out, _ = capsys.readouterr()
    assert code == 2 and f"FAIL master port: 127.0.0.1 port {port} did not accept" in out, out
    assert "WARN master port: master_addr localhost is a loopback address" in out
    main([*JOB, "--num_nodes", "2", "--node_rank", "1", "--timeout_s", "1", "--master_port", str(other)])
    assert f"port {other} did not accept" in capsys.readouterr()[0]
    monkeypatch.setenv("MASTER_PORT", "29x")
    assert main(JOB) == 2
    assert capsys.readouterr()[1] == ("error: MASTER_PORT='29x' in the environment is not a port number (pass "
                                      "--master_port or unset it)\n")


def test_bad_options_are_one_error_line(in_recipe, capsys):
    from asrkit.bin.doctor import main
    assert main([*JOB, "--num_nodes", "2", "--node_rank", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "error: --node_rank 2 is outside 0..1 (--num_nodes 2)\n"


def test_two_nodes_on_loopback_agree_and_measure_the_all_reduce(recipe):
    port = free_port()
    results = finish([start_node(recipe, 0, port), start_node(recipe, 1, port)])
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, f"node {rank} ({code}):\n{out}\n{err}"
        assert lines_of(out, "FAIL") == [] and "Traceback" not in err
        assert "OK agreement: the 2 node(s) have the same asrkit source" in out
        assert "config (less launch), CMVN file, CV data list, train data list, units file" in out
        [line] = [s for s in out.splitlines() if s.startswith("OK allreduce: ")]
        assert line.startswith("OK allreduce: 2 nodes over gloo: latency ") and "bus bandwidth 0.25 MB " in line
        assert line.count(" MB/s") == 2
        # the only warning: a loopback master address
        assert [w.split(":")[0] for w in lines_of(out, "WARN")] == ["WARN master port"], out
    assert f"OK master port: 127.0.0.1:{port} reachable (after " in results[1][1]
    # every node prints the same measurement (the slowest node's times)
    assert [s for s in results[0][1].splitlines() if "allreduce" in s] == \
           [s for s in results[1][1].splitlines() if "allreduce" in s]


def test_two_nodes_with_different_configs_fail_naming_the_node_and_key(recipe):
    port = free_port()
    results = finish([start_node(recipe, 0, port), start_node(recipe, 1, port, "--override", "max_epoch=3")])
    for rank, (code, out, err) in enumerate(results):
        assert code == 2, f"node {rank} ({code}):\n{out}\n{err}"
        [line] = lines_of(out, "FAIL")
        assert line.startswith("FAIL agreement: node 1 (host ") and "differs from node 0 (host " in line, line
        assert "config key max_epoch (rank 1: 3, rank 0: 2)" in line
        assert "OK allreduce: 2 nodes over gloo" in out  # (the network is fine: still measured)


def test_a_check_that_breaks_is_its_fail_line_and_the_others_still_run(in_recipe, monkeypatch, capsys):
    import asrkit.doctor.network
    from asrkit.bin.doctor import main

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(asrkit.doctor.network, "check_network", broken)
    code = main([*JOB, "--master_port", str(free_port())])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    assert lines_of(out, "FAIL") == ["FAIL network: the check stopped with RuntimeError: boom -> report this with the "
                                     "lines above (the asrkit issue tracker)"]
    assert "OK files: train data list" in out and "OK master port: " in out
