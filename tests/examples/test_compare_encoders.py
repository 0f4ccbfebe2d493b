"""examples/digits/s0/local/compare_encoders.sh's wiring, with every Python tool but the
checkpoint-naming CLI and tools/encoder_table.py replaced by a stub that records its calls (no
training): per encoder and seed run.sh's training then decoding into exp/<encoder>_seed<N>
with the encoder's config and the seed, the decode log kept, a finished run skipped, the table
at the end."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.examples.recipe_helpers import copy_recipe
from tests.helpers import REPO

STUB = f"""python() {{
  case "$*" in *asrkit.bin.checkpoints*|*encoder_table.py*)
    PYTHONPATH='{REPO}' command '{sys.executable}' "$@"; return ;; esac
""" + r"""  echo "python $*" >> "$CALLS"
  case "$*" in
  *average_model*) mkdir -p "$(dirname "${@: -1}")"; echo averaged > "${@: -1}" ;;
  *asrkit.bin.recognize*) echo "RTF 0.0200 (model 0.0100) over 9.0 s of audio, 3 utterances decoded, none skipped" ;;
  *score_decodes.py*) local d=${@: -1}; mkdir -p "$d/attention_rescoring"
    echo "%CER 1.50 [ 3 / 200, 0 ins, 1 del, 2 sub ]" > "$d/attention_rescoring/cer" ;;
  esac; }
export -f python
"""


def run(recipe, calls, *args):
    env = dict(os.environ, ASRKIT_ROOT=str(REPO), CALLS=str(calls), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(["bash", "-c", STUB + 'bash local/compare_encoders.sh "$@"', "run", *args], cwd=recipe,
                          env=env, capture_output=True, text=True, timeout=120)
    lines = calls.read_text().splitlines() if calls.exists() else []
    if calls.exists():
        calls.unlink()
    return proc, lines


def test_each_encoder_and_seed_trains_and_decodes_into_its_folder_then_the_table(tmp_path):
    recipe = copy_recipe("digits", tmp_path / "digits")
    for f in ("dict/units.txt", "train/global_cmvn", "test/data.list"):  # (the data stages are done)
        (recipe / "data" / f).parent.mkdir(parents=True, exist_ok=True)
        (recipe / "data" / f).write_text("x\n")
    calls = tmp_path / "calls.log"
    proc, lines = run(recipe, calls, "--encoders", "conformer_rel_pos squeezeformer", "--seeds", "1 2",
                      "--real_speakers", "", "--train_overrides", "max_epoch=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stages 0-3 skipped" in proc.stderr
    train = [c for c in lines if "asrkit.bin.train" in c]
    assert len(train) == 4
    for call, (encoder, seed) in zip(train, [(e, s) for e in ("conformer_rel_pos", "squeezeformer") for s in (1, 2)]):
        config = "conformer" if encoder == "conformer_rel_pos" else encoder
        assert f"--config conf/train_{config}_cpu.yaml " in call and f"--model_dir exp/{encoder}_seed{seed} " in call
        extra = "--override encoder_conf.pos_enc_layer_type=rel_pos " if encoder == "conformer_rel_pos" else ""
        assert f"--override max_epoch=1 {extra}--override seed={seed} " in call
    decoded = [c.split("--result_dir ")[1].split()[0] for c in lines if "asrkit.bin.recognize" in c]
    assert decoded == [f"exp/{e}_seed{s}/decode_{t}" for e in ("conformer_rel_pos", "squeezeformer") for s in (1, 2)
                       for t in ("test", "test_noisy")]
    assert "RTF 0.0200" in (recipe / "exp" / "squeezeformer_seed2" / "run_decode.log").read_text()
    table = (recipe / "exp" / "encoders.md").read_text()
    assert table in proc.stdout and "| squeezeformer | - | - | - | 1.50 ± 0.00 | 0.0200 | 2 |" in table

    proc, lines = run(recipe, calls, "--encoders", "squeezeformer", "--seeds", "1 3", "--real_speakers", "")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exp/squeezeformer_seed1 is done: skipped" in proc.stderr
    assert [c.split("--model_dir ")[1].split()[0] for c in lines if "asrkit.bin.train" in c] == ["exp/squeezeformer_seed3"]

    proc, _ = run(recipe, calls, "--encoders", "conformer nosuchformer")
    assert proc.returncode == 2 and "no config conf/train_nosuchformer_cpu.yaml" in proc.stderr
    proc, _ = run(recipe, calls, "--dir", "exp/x")
    assert proc.returncode == 2 and "--dir is this script's to choose" in proc.stderr
