"""The digits recipe's --seeds, --augment and --average_mode ema wiring, with every Python
tool but the checkpoint-naming CLI and tools/seed_summary.py replaced by a stub that
records its calls (no training): one run directory per seed with its seed override, the
augmentation switched on, the hard test decoded beside test, EMA decodes beside the
average's, and the mean ± sd table at the end."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.examples.recipe_helpers import copy_recipe
from tests.helpers import REPO

STUB = f"""python() {{
  case "$*" in *asrkit.bin.checkpoints*|*seed_summary.py*)
    PYTHONPATH='{REPO}' command '{sys.executable}' "$@"; return ;; esac
""" + r"""  echo "python $*" >> "$CALLS"
  case "$*" in
  *average_model*) mkdir -p "$(dirname "${@: -1}")"; echo averaged > "${@: -1}" ;;
  *score_decodes.py*) local d=${@: -1}; mkdir -p "$d/attention_rescoring"
    case "$d" in *seed1*) cer=1.50 ;; *) cer=2.50 ;; esac
    echo "%CER $cer [ 3 / 200, 0 ins, 1 del, 2 sub ]" > "$d/attention_rescoring/cer" ;;
  esac; }
export -f python
"""


def run(recipe, calls, *args):
    env = dict(os.environ, ASRKIT_ROOT=str(REPO), CALLS=str(calls), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(["bash", "-c", STUB + 'bash run.sh "$@"', "run", *args], cwd=recipe, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = calls.read_text().splitlines()
    calls.unlink()
    return proc, lines


def test_seeds_train_and_decode_one_run_per_seed_then_print_mean_and_sd(tmp_path):
    recipe = copy_recipe("digits", tmp_path / "digits")
    calls = tmp_path / "calls.log"
    proc, lines = run(recipe, calls, "--stage", "4", "--stop_stage", "5", "--seeds", "1 2", "--augment", "true",
                      "--train_overrides", "ema_decay=0.999")
    train = [c for c in lines if "asrkit.bin.train" in c]
    assert len(train) == 4  # two phases per seed (the real speakers: docs/recipes.md)
    for seed, first, second in zip((1, 2), train[::2], train[1::2]):
        assert f"--model_dir exp/conformer_cpu_aug_seed{seed}/synthetic " in first and "--enc_init" not in first
        assert f"--model_dir exp/conformer_cpu_aug_seed{seed} " in second
        assert f"--enc_init exp/conformer_cpu_aug_seed{seed}/synthetic/avg_3.pt" in second
        for call in (first, second):
            assert f"--override ema_decay=0.999 --override seed={seed}" in call
            assert "--override dataset_conf.noise=true" in call and "--override dataset_conf.reverb=true" in call
        assert "--override dataset_conf.band_limit=true" in second and "band_limit" not in first
    decoded = [c.split("--result_dir ")[1].split()[0] for c in lines if "asrkit.bin.recognize" in c]
    assert decoded == [f"exp/conformer_cpu_aug_seed{s}/decode_{t}" for s in (1, 2) for t in ("test", "test_noisy")]
    assert "| test_noisy | attention_rescoring | 1.50 | 2.50 | 2.00 ± 0.71 |" in proc.stdout
    assert (recipe / "exp" / "conformer_cpu_aug_seeds.md").read_text() in proc.stdout

    proc, lines = run(recipe, calls, "--stage", "5", "--stop_stage", "5", "--seeds", "1 2", "--augment", "true",
                      "--average_mode", "ema")
    assert not [c for c in lines if "asrkit.bin.train" in c]
    averaged = [c for c in lines if "average_model" in c]
    assert len(averaged) == 2 and all("--mode ema --dst exp/conformer_cpu_aug_seed" in c and c.endswith("avg_ema.pt")
                                      for c in averaged)
    decoded = [c.split("--result_dir ")[1].split()[0] for c in lines if "asrkit.bin.recognize" in c]
    assert decoded == [f"exp/conformer_cpu_aug_seed{s}/decode_{t}_ema" for s in (1, 2) for t in ("test", "test_noisy")]
    assert "| test_ema | attention_rescoring | 1.50 | 2.50 |" in proc.stdout
    assert "| test | attention_rescoring | 1.50 | 2.50 |" in proc.stdout  # (the averages' rows, from before)


def test_one_seed_without_options_trains_as_before(tmp_path):
    recipe = copy_recipe("digits", tmp_path / "digits")
    calls = tmp_path / "calls.log"
    _, lines = run(recipe, calls, "--stage", "4", "--stop_stage", "4", "--real_speakers", "")
    (train,) = [c for c in lines if "asrkit.bin.train" in c]
    assert "--model_dir exp/conformer_cpu " in train and "--override" not in train.replace(
        "--override dataset_conf.num_workers=1", "")
    # with the real speakers (the default): the first phase as before, into <dir>/synthetic
    _, lines = run(recipe, calls, "--stage", "4", "--stop_stage", "4")
    first, second = [c for c in lines if "asrkit.bin.train" in c]
    assert "--model_dir exp/conformer_cpu/synthetic " in first and "--override" not in first.replace(
        "--override dataset_conf.num_workers=1", "")
    assert "--train_data data/train_finetune/data.list" in second
    assert "--enc_init_mods cmvn.,encoder.,decoder.,ctc." in second
