"""tools/encoder_table.py on fabricated run directories of
examples/digits/s0/local/compare_encoders.sh: the rows grouped by encoder over the seeds, the
parameters and epoch times read from the training logs (first phase, resumed epochs, midnight),
CER mean ± sd per mode, RTF from the decode log of the test set only."""
from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO, repo_env
from tools.encoder_table import main

MODES = ("ctc_greedy_search", "attention_rescoring")


def train_log(path, params, epochs, start_s, epoch_s, encoder="conformer"):
    """A rank-0 log: the model line, then per epoch its start, a step line, its data line
    (``epoch_s`` later), CV and the save 10 s after that."""
    def stamp(t):
        t %= 86400
        return f"{t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
    lines = [f"{stamp(start_s)} [rank 0] INFO asrkit.train: model: {encoder} encoder + transformer decoder, "
             f"{params:.2f} M parameters; 4000 train / 300 CV utterances; 1 threads"]
    t = start_s
    for e in range(epochs):
        lines += [f"{stamp(t)} [rank 0] INFO asrkit.train: epoch {e}: 190 batches per rank",
                  f"{stamp(t + 5)} [rank 0] INFO asrkit.train: epoch {e} step 50 batch 50/190 | loss 3.0",
                  f"{stamp(t + epoch_s)} [rank 0] INFO asrkit.train: epoch {e} data: 4000 utterances trained, 0 "
                  "skipped as bad data (none), over 2 rank(s)",
                  f"{stamp(t + epoch_s + 10)} [rank 0] INFO asrkit.train: CV epoch {e}: loss 1.0 (300 utterances)",
                  f"{stamp(t + epoch_s + 10)} [rank 0] INFO asrkit.train: saved exp/x/epoch_{e}.pt (epoch {e}, step 1)"]
        t += epoch_s + 10
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def fake_run(run, params, epoch_s, cers, rtf, encoder):
    train_log(run / "synthetic" / "log" / "rank0.log", params, 3, 86400 - 100, epoch_s, encoder)  # over midnight
    train_log(run / "log" / "rank0.log", params, 1, 3600, 2 * epoch_s, encoder)
    for mode, cer in zip(MODES, cers):
        (run / "decode_test" / mode).mkdir(parents=True)
        (run / "decode_test" / mode / "cer").write_text(f"%CER {cer:.2f} [ 4 / 400, 0 ins, 1 del, 3 sub ]\n"
                                                        "%SER 2.00 [ 6 / 300 ]\n", encoding="utf-8")
    (run / "run_decode.log").write_text(
        f"[10:00:00] stage 5: decode test (ctc_greedy_search attention_rescoring) -> {run}/decode_test\n"
        f"RTF {rtf:.4f} (model 0.0100) over 900.0 s of audio, 300 utterances decoded, none skipped\n"
        f"[10:01:00] stage 5: decode test_noisy (ctc_greedy_search attention_rescoring) -> {run}/decode_test_noisy\n"
        "RTF 0.9999 (model 0.5000) over 900.0 s of audio, 300 utterances decoded, none skipped\n", encoding="utf-8")


def test_rows_per_encoder_with_mean_and_sd_over_seeds(tmp_path, capsys):
    fake_run(tmp_path / "conformer_seed1", 1.92, 80, (1.0, 0.8), 0.02, "conformer")
    fake_run(tmp_path / "conformer_seed2", 1.92, 90, (2.0, 1.2), 0.04, "conformer")
    fake_run(tmp_path / "branchformer_seed1", 1.90, 100, (1.5, 1.0), 0.03, "branchformer")
    # a seed still training: its log counts, it has no score
    train_log(tmp_path / "branchformer_seed2" / "synthetic" / "log" / "rank0.log", 1.90, 1, 0, 120, "branchformer")
    out = tmp_path / "table.md"
    assert main([*(str(tmp_path / n) for n in ("conformer_seed1", "conformer_seed2", "branchformer_seed1",
                                               "branchformer_seed2")), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.read_text(encoding="utf-8") == text
    header, rule, conformer, branchformer = text.splitlines()
    assert header == ("| encoder | parameters | training s/epoch | training min (all) | ctc_greedy_search CER % | "
                      "attention_rescoring CER % | decode RTF | seeds |")
    assert rule.count("---") == 8
    # s/epoch: 80 and 90 (the first phase's); all: epochs with CV in both phases, (3 x 90 + 170 + 3 x 110 + 200) / 2 s
    assert conformer == "| conformer | 1.92 M | 85 | 8 | 1.50 ± 0.71 | 1.00 ± 0.28 | 0.0300 | 2 |"
    assert branchformer == "| branchformer | 1.90 M | 110 | 6 | 1.50 ± 0.00 | 1.00 ± 0.00 | 0.0300 | 1 |"


def test_a_resumed_epoch_counts_from_its_resumption_and_no_score_is_exit_1(tmp_path, capsys):
    run = tmp_path / "squeezeformer_seed3"
    log = run / "log" / "rank0.log"
    log.parent.mkdir(parents=True)
    log.write_text("10:00:00 [rank 0] INFO asrkit.train: model: squeezeformer encoder + transformer decoder, "
                   "1.94 M parameters; 4000 train / 300 CV utterances; 1 threads\n"
                   "10:00:00 [rank 0] INFO asrkit.train: epoch 0: 190 batches per rank\n"
                   "11:00:00 [rank 0] INFO asrkit.train: resumed from exp/x/step_100.pt: epoch 0, step 100\n"
                   "11:00:00 [rank 0] INFO asrkit.train: epoch 0: 190 batches per rank\n"
                   "11:00:40 [rank 0] INFO asrkit.train: epoch 0 data: 2000 utterances trained\n", encoding="utf-8")
    assert main([str(run)]) == 1
    assert "no decode_test/<mode>/cer" in capsys.readouterr().err
    (run / "decode_test" / "attention").mkdir(parents=True)
    (run / "decode_test" / "attention" / "cer").write_text("%CER 3.00 [ 1 / 33 ]\n", encoding="utf-8")
    assert main([str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[2] == "| squeezeformer | 1.94 M | 40 | - | 3.00 ± 0.00 | - | 1 |"


def test_help_runs_as_a_script():
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "encoder_table.py"), "--help"], capture_output=True,
                          text=True, env=repo_env(), timeout=30)
    assert proc.returncode == 0 and "compare_encoders.sh" in proc.stdout
