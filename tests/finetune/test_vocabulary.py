"""A changed vocabulary between ``--enc_init``'s model and the run (asrkit.finetune.vocabulary):
refused in one line naming both vocabularies and the option, accepted with it."""
from __future__ import annotations

from tests.helpers import train_here as train


def _units_variant(src, dst, edit):
    lines = src.read_text(encoding="utf-8").splitlines()
    symbols = [line.split()[0] for line in lines]
    symbols = edit(symbols)
    dst.write_text("".join(f"{s} {i}\n" for i, s in enumerate(symbols)), encoding="utf-8")
    return dst


def _swap_two(symbols):
    i, j = len(symbols) - 2, len(symbols) - 3  # two letters, not the special units
    symbols[i], symbols[j] = symbols[j], symbols[i]
    return symbols


def _start(tiny_experiment, base_model, model_dir, units, *flags):
    cfg, start = base_model
    return train(tiny_experiment, model_dir, cfg, "--enc_init", start,
                 "--enc_init_mods", "cmvn.,encoder.,decoder.,ctc.", "--max_steps", "1",
                 "--override", f"tokenizer_conf.symbol_table_path={units}", *flags, check=False)


def test_a_changed_vocabulary_is_refused_in_one_line_and_accepted_with_the_option(tiny_experiment, base_model,
                                                                                    tmp_path):
    units = tiny_experiment.units
    bigger = _units_variant(units, tmp_path / "bigger.txt", lambda s: [*s[:-1], "Q", s[-1]])
    swapped = _units_variant(units, tmp_path / "swapped.txt", _swap_two)
    for variant, how in ((bigger, "units, SHA-256"), (swapped, "2 unit(s) at other ids")):
        run = _start(tiny_experiment, base_model, tmp_path / variant.stem, variant)
        lines = [line for line in run.stderr.splitlines() if "the vocabulary changed" in line]
        assert run.returncode == 2 and len(lines) == 1, run.stderr[-2000:]
        line = lines[0]
        assert str(units) in line and str(variant) in line and how in line
        assert "--reinit_output_layers" in line and "ctc.ctc_lo" in line and "Traceback" not in run.stderr
        assert not list((tmp_path / variant.stem).glob("*.pt"))
        ok = _start(tiny_experiment, base_model, tmp_path / f"{variant.stem}_ok", variant, "--reinit_output_layers")
        assert ok.returncode == 0, ok.stderr[-2000:]
        [said] = [line for line in ok.stderr.splitlines() if "reinit_output_layers:" in line]
        assert "start afresh" in said and all(f" {layer}" in said for layer in
                                               ("ctc.ctc_lo", "decoder.embed", "decoder.output_layer"))
    # the same units in other bytes (CRLF line ends): the same vocabulary
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(units.read_bytes().replace(b"\n", b"\r\n"))
    same = _start(tiny_experiment, base_model, tmp_path / "crlf", crlf)
    assert same.returncode == 0, same.stderr[-2000:]
