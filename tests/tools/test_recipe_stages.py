"""The shared recipe stages' rules for redoing work (tools/recipe_stages.sh), with the
Python tools (all but the checkpoint-naming CLI) replaced by a stub that records its
calls: the stale-average trap (training longer, then rerunning stage 5, must not decode the
old average) and units rebuilt when their options or the training text change."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

# the checkpoint-naming CLI runs for real (it needs no torch); every other tool is recorded
STUB = f"""
python() {{ case "$*" in *asrkit.bin.checkpoints*)
    PYTHONPATH='{REPO}' command '{sys.executable}' "$@"; return ;; esac
""" + r"""  echo "python $*" >> calls.log; case "$*" in
  *average_model*) echo averaged > "${@: -1}" ;;
  *bin.export*) echo exported > "${@: -1}" ;;
  *make_units.py*) echo "<blank> 0" > "${@: -1}" ;;
  esac; }
"""


def run_stages(cwd: Path, body: str, check: bool = True) -> subprocess.CompletedProcess:
    """``body`` after the shared defaults, the stages and the stub python (set -eu, as recipes)."""
    script = (f"set -euo pipefail\n. '{REPO}/tools/recipe_defaults.sh'\n. '{REPO}/tools/recipe_stages.sh'\n"
              f"{STUB}\n" + body)
    proc = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 or not check, proc.stderr
    return proc


AVERAGE = 'stage_average_decode_score 5 "${decoding[@]}" dir=exp checkpoint=exp/avg_2.pt type=raw average_num=2'
EXPORT = "stage_export 6 config=exp/train.yaml checkpoint=exp/avg_2.pt out=exp/final.zip"


def calls(cwd: Path) -> list[str]:
    log = cwd / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return lines


def touch_later(path: Path, than: Path) -> None:
    """Give ``path`` an mtime 2 s after ``than``'s (no sleeping, no timestamp-resolution race)."""
    path.touch()
    t = than.stat().st_mtime + 2
    os.utime(path, (t, t))


def test_stage_5_reaverages_after_more_training_and_stage_6_reexports(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    for e in (0, 1):
        (exp / f"epoch_{e}.pt").write_text("weights")
    run_stages(tmp_path, f"{AVERAGE}; {EXPORT}")
    first = calls(tmp_path)
    assert any("average_model" in c for c in first) and any("bin.export" in c for c in first)

    run_stages(tmp_path, f"{AVERAGE}; {EXPORT}")  # nothing new: nothing redone
    assert calls(tmp_path) == []

    touch_later(exp / "epoch_2.pt", exp / "avg_2.pt")  # trained one more epoch
    run_stages(tmp_path, f"{AVERAGE}; {EXPORT}")
    again = calls(tmp_path)
    assert any("average_model" in c for c in again) and any("bin.export" in c for c in again), again


def test_stage_5_asks_the_naming_rule_in_a_directory_with_spaces(tmp_path):
    """Any ``avg_*.pt`` is an average (``avg_best.pt`` too), redone when an epoch checkpoint
    of the directory -- found by ``asrkit.bin.checkpoints``, whose paths may hold spaces --
    is newer; a newer file that is no epoch checkpoint (``epoch_1.pt.bak``) is no reason."""
    exp = tmp_path / "my exp"
    exp.mkdir()
    (exp / "epoch_0.pt").write_text("weights")
    stage = ('stage_average_decode_score 5 "${decoding[@]}" dir="my exp" checkpoint="my exp/avg_best.pt" '
             'type=raw average_num=2')
    run_stages(tmp_path, stage)
    assert [c for c in calls(tmp_path) if "average_model" in c]
    touch_later(exp / "epoch_1.pt.bak", exp / "avg_best.pt")
    run_stages(tmp_path, stage)
    assert calls(tmp_path) == []
    touch_later(exp / "epoch_1.pt", exp / "avg_best.pt")
    run_stages(tmp_path, stage)
    assert [c for c in calls(tmp_path) if "average_model" in c]


def test_an_explicit_checkpoint_is_never_overwritten_by_an_average(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    chosen = exp / "epoch_0.pt"
    chosen.write_text("weights")
    touch_later(exp / "epoch_1.pt", chosen)
    run_stages(tmp_path, AVERAGE.replace("exp/avg_2.pt", "exp/epoch_0.pt"))
    assert not any("average_model" in c for c in calls(tmp_path))
    assert chosen.read_text() == "weights"


def test_units_are_rebuilt_when_options_or_text_change(tmp_path):
    text = tmp_path / "data" / "train" / "text"
    text.parent.mkdir(parents=True)
    text.write_text("u1 a b\n")
    units = "data/dict/units.txt"
    run_stages(tmp_path, f"stage_units 2 what=chars units={units}")
    assert len(calls(tmp_path)) == 1
    run_stages(tmp_path, f"stage_units 2 what=chars units={units}")
    assert calls(tmp_path) == []
    run_stages(tmp_path, f"stage_units 2 what=bpe units={units} -- --bpe 30")
    assert calls(tmp_path) == [f"python tools/make_units.py --bpe 30 data/train/text {units}"]
    text.write_text("u1 a b c\n")
    run_stages(tmp_path, f"stage_units 2 what=bpe units={units} -- --bpe 30")
    assert len(calls(tmp_path)) == 1


def test_stages_take_what_they_use_and_print_their_number(tmp_path):
    """A stage reads no recipe variable: what it uses comes as NAME=VALUE arguments (an
    unknown or missing one is refused, naming the stage), its number from the caller."""
    (tmp_path / "data" / "dev").mkdir(parents=True)
    proc = run_stages(tmp_path, "stage_data_lists 7 type=raw -- dev")
    assert "stage 7: data lists (raw): dev" in proc.stderr
    assert calls(tmp_path) == ["python tools/make_raw_list.py data/dev/wav.scp data/dev/text data/dev/data.list"]
    typo = run_stages(tmp_path, "stage_export 6 config=c checkpoint=k output=o", check=False)
    assert typo.returncode == 2 and "stage_export takes NAME=VALUE arguments from: config checkpoint out onnx_dir check_data -- " \
        "not 'output=o'" in typo.stderr, typo.stderr
    missing = run_stages(tmp_path, "stage_cmvn 1", check=False)
    assert missing.returncode == 2 and "stage_cmvn needs config=VALUE" in missing.stderr
    assert calls(tmp_path) == []


def test_stage_train_launches_what_it_is_given(tmp_path):
    """The launch settings arrive through the shared ``launch`` array (after the options)."""
    body = ('num_nodes=2; node_rank=1; master_addr=10.1.2.3; nproc_per_node=3; rdzv_timeout=60\n'
            '. "$ASRKIT_STAGES"\n'
            'stage_train 4 "${launch[@]}" config=c.yaml dir=exp/x type=shard workers=0 '
            'overrides="a.b=1 c=2" checkpoint=auto -- --max_steps 5')
    proc = subprocess.run(["bash", "-c", f". '{REPO}/tools/recipe_defaults.sh'\n{STUB}\n{body}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ASRKIT_STAGES": str(REPO / "tools" / "recipe_stages.sh")})
    assert proc.returncode == 0, proc.stderr
    assert "stage 4: train c.yaml on data/train -> exp/x (2 node(s) x 3 process(es), node_rank 1)" in proc.stderr
    assert calls(tmp_path) == [  # node 1 first waits for the master's port (tools/wait_for_master.py)
        "python tools/wait_for_master.py --node_rank 1 --timeout 60 10.1.2.3 29500",
        "python -m torch.distributed.run --nnodes 2 --nproc_per_node 3 --node_rank 1 --master_addr 10.1.2.3 "
        "--master_port 29500 --rdzv_conf timeout=60 --max_restarts 0 -m asrkit.bin.train --config c.yaml "
        "--train_data data/train/data.shards.list --cv_data data/dev/data.shards.list --model_dir exp/x "
        "--override dataset_conf.num_workers=0 --override a.b=1 --override c=2 --checkpoint auto --max_steps 5"]


def test_stage_train_rdzv_timeout_with_c10d_and_refused_values(tmp_path):
    """c10d rendezvous gets the timeout as join_timeout, and every node waits for the
    endpoint first; a timeout that is not a positive number of seconds is refused."""
    def stage_train(settings: str) -> subprocess.CompletedProcess:
        body = f'{settings}\n. "$ASRKIT_STAGES"\nstage_train 4 "${{launch[@]}}" config=c.yaml dir=exp/x type=raw'
        return subprocess.run(["bash", "-c", f". '{REPO}/tools/recipe_defaults.sh'\n{STUB}\n{body}"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "ASRKIT_STAGES": str(REPO / "tools" / "recipe_stages.sh")})

    proc = stage_train("num_nodes=2; node_rank=0; nproc_per_node=1; HOST_NODE_ADDR=10.1.2.3:29400; rdzv_timeout=30")
    assert proc.returncode == 0, proc.stderr
    waited, launched = calls(tmp_path)
    assert waited == "python tools/wait_for_master.py --node_rank 0 --timeout 30 10.1.2.3 29400"
    assert ("--rdzv_backend c10d --rdzv_endpoint 10.1.2.3:29400 --rdzv_id asrkit_x --rdzv_conf join_timeout=30 "
            "--max_restarts 0") in launched
    for bad in ("0", "ten", "-5"):
        proc = stage_train(f"num_nodes=2; node_rank=1; rdzv_timeout={bad}")
        assert proc.returncode == 2
        assert f"stage_train: rdzv_timeout must be a positive number of seconds, not '{bad}'" in proc.stderr


def test_stage_5_hands_the_decoding_options_to_recognize_and_keeps_chunked_results_apart(tmp_path):
    """decode_* variables (set before the stages are sourced, as options are; the transducer
    modes' weights too) reach recognize; a chunked decode writes decode_SET_chunkN[_leftM], not over decode_SET."""
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "avg_2.pt").write_text("averaged")
    run_stages(tmp_path, f"{AVERAGE} -- test")
    recognize = [c for c in calls(tmp_path) if "bin.recognize" in c]
    assert len(recognize) == 1 and recognize[0].endswith(
        "--ctc_weight 0.3 --reverse_weight 0.0 --length_penalty 0.0 --blank_penalty 0.0 --search_ctc_weight 0.3 "
        "--search_transducer_weight 0.7 --transducer_weight 0.5 --attn_weight 0.5 --decoding_chunk_size -1 "
        "--num_decoding_left_chunks -1 --device cpu --result_dir exp/decode_test"), recognize
    options = ("decode_length_penalty=0.5; decode_blank_penalty=1.5; decode_chunk_size=16; decode_left_chunks=4; "
               "decode_reverse_weight=0.3; decode_search_ctc_weight=0.4; decode_search_transducer_weight=0.6; "
               "decode_transducer_weight=0.7; decode_attn_weight=0.2; "
               f"decode_simulate_streaming=true\n. '{REPO}/tools/recipe_stages.sh'\n")
    run_stages(tmp_path, options + f"{AVERAGE} -- test")
    assert [c for c in calls(tmp_path) if "recognize" in c or "score" in c] == [
        "python -m asrkit.bin.recognize --config exp/train.yaml --checkpoint exp/avg_2.pt "
        "--data data/test/data.list --modes ctc_greedy_search ctc_prefix_beam_search attention "
        "attention_rescoring --beam_size 10 --batch_size 16 --ctc_weight 0.3 --reverse_weight 0.3 --length_penalty 0.5 "
        "--blank_penalty 1.5 --search_ctc_weight 0.4 --search_transducer_weight 0.6 --transducer_weight 0.7 "
        "--attn_weight 0.2 --decoding_chunk_size 16 --num_decoding_left_chunks 4 --simulate_streaming "
        "--device cpu --result_dir exp/decode_test_chunk16_left4",
        "python tools/score_decodes.py --ref data/test/text --decode_dir exp/decode_test_chunk16_left4"]
    run_stages(tmp_path, f"{AVERAGE} chunk=8 -- test")
    assert any(c.endswith("--result_dir exp/decode_test_chunk8") for c in calls(tmp_path))
    bad = run_stages(tmp_path, f"{AVERAGE} streaming=yes -- test", check=False)
    assert bad.returncode == 2 and "streaming=true|false, not 'yes'" in bad.stderr
    assert calls(tmp_path) == []


def test_lm_stage_rebuilds_on_new_options_or_text_and_the_lm_decode_goes_apart(tmp_path):
    """stage_lm: one train_lm.py call, skipped when up to date, redone for another order or
    other transcripts; stage_tune_fusion hands the grid to tune_fusion.py; extra= and name=
    bring the LM options to recognize, into decode_SET_lm."""
    text = tmp_path / "data" / "train" / "text"
    text.parent.mkdir(parents=True)
    text.write_text("u1 one two\n")
    lm = "data/lm/3gram.arpa"
    stub_lm = f'python() {{ echo "python $*" >> calls.log; echo lm > {lm}; }}\n'
    run_stages(tmp_path, stub_lm + f"stage_lm 7 out={lm}")
    assert calls(tmp_path) == [f"python tools/train_lm.py --order 3 --discount_fallback data/train/text {lm}"]
    run_stages(tmp_path, stub_lm + f"stage_lm 7 out={lm}")
    assert calls(tmp_path) == []
    run_stages(tmp_path, stub_lm + f"stage_lm 7 out={lm} order=4 prune='0 0 1'")
    assert calls(tmp_path) == [f"python tools/train_lm.py --order 4 --discount_fallback --prune 0 0 1 "
                               f"data/train/text {lm}"]
    text.write_text("u1 one two three\n")
    run_stages(tmp_path, stub_lm + f"stage_lm 7 out={lm} order=4 prune='0 0 1'")
    assert len(calls(tmp_path)) == 1
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "avg_2.pt").write_text("averaged")
    run_stages(tmp_path, f'stage_tune_fusion 8 "${{decoding[@]}}" dir=exp checkpoint=exp/avg_2.pt type=raw '
                         f'lm={lm} mode=attention_rescoring weights="0.2 0.4" bonuses="1 2" -- dev')
    assert calls(tmp_path) == [
        "python tools/tune_fusion.py --config exp/train.yaml --checkpoint exp/avg_2.pt --data data/dev/data.list "
        f"--mode attention_rescoring --lm_path {lm} --lm_weight 0.2 0.4 --word_bonus 1 2 --beam_size 10 "
        "--batch_size 16 --ctc_weight 0.3 --reverse_weight 0.0 --device cpu --json exp/fusion_attention_rescoring.json "
        "--best_args exp/fusion_attention_rescoring.args"]
    run_stages(tmp_path, f'{AVERAGE} modes=ctc_prefix_beam_search name=_lm '
                         f'extra="--lm_path {lm} --lm_weight 0.4 --word_bonus 2" -- test')
    recognize = [c for c in calls(tmp_path) if "bin.recognize" in c]
    assert len(recognize) == 1 and recognize[0].endswith(
        f"--num_decoding_left_chunks -1 --lm_path {lm} --lm_weight 0.4 --word_bonus 2 --device cpu "
        "--result_dir exp/decode_test_lm"), recognize


def test_stage_train_single_node_moves_off_a_port_in_use(tmp_path):
    """One node: a master_port something on this host listens on (another training) is
    replaced by the next free port, said on stderr, instead of torchrun's EADDRINUSE."""
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        body = (f'num_nodes=1; master_port={port}\n. "$ASRKIT_STAGES"\n'
                'stage_train 4 "${launch[@]}" config=c.yaml dir=exp/x type=raw')
        proc = subprocess.run(["bash", "-c", f". '{REPO}/tools/recipe_defaults.sh'\n{STUB}\n{body}"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "ASRKIT_STAGES": str(REPO / "tools" / "recipe_stages.sh")})
    assert proc.returncode == 0, proc.stderr
    moved = re.search(rf"master_port {port} is in use on this host \(another training\?\): using (\d+)", proc.stderr)
    assert moved and int(moved.group(1)) > port, proc.stderr
    assert f"--master_port {moved.group(1)} " in calls(tmp_path)[0]


def test_serve_hint_prints_the_command_that_serves_the_model(tmp_path):
    proc = run_stages(tmp_path, "serve_hint 6 dir=exp/u2pp checkpoint=exp/u2pp/avg_3.pt")
    assert "asrkit serve --model exp/u2pp --checkpoint exp/u2pp/avg_3.pt" in proc.stderr
    for recipe in ("digits", "sentences"):  # (a run ends with it, after its last stage)
        text = (REPO / "examples" / recipe / "s0" / "run.sh").read_text()
        last = text[text.rindex("run_stage "):]
        hint = 'serve_hint "$stop_stage" dir="$dir" checkpoint="$decode_checkpoint"'
        assert hint in last and last.rstrip().endswith("exit 0"), recipe
