"""Export a trained model as TorchScript (what WeNet-style runtimes load).

    python -m asrkit.bin.export --config exp/conformer/train.yaml \\
        --checkpoint exp/conformer/avg_5.pt --output exp/conformer/final.zip

The archive holds the scripted model (CMVN, encoder, CTC head and/or decoder) with the
searches of asrkit.decode, compiled -- ``ctc_greedy_search`` and ``ctc_prefix_beam_search``
(need a CTC head), ``attention`` (needs a decoder), ``attention_rescoring`` (needs both),
``decode`` (several from one encoder pass; ``supported_modes()`` lists what this model
can run); for a transducer also ``rnnt_greedy_search``, ``rnnt_beam_search`` and
``modified_beam_search`` (the RNN-T rescoring modes need torchaudio's loss and stay eager) -- the metadata a runtime needs (units,
``<sos/eos>``, subsampling, fbank options, sample rate) and, as extra files,
``train.yaml``, ``units.txt`` and ``meta.json`` (with the SHA-256 of the units file and
BPE model under ``input_digests``).  A units file that does not fit the checkpoint (another
number of units, or other units than the checkpoint recorded it was trained with) is
refused with one line, exit status 2, before anything is scripted; so is an ``--output`` whose
folder cannot be created or written, before anything is read.  Before the file is written it is
loaded back and checked against eager decoding on a random batch (``--no_verify``
skips that); the write is atomic.  ``tools/decode_exported.py`` shows how to use it.
Exit status 0 on success, 1 on a clear error, 2 on bad usage.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch
import yaml

from asrkit.bin.exit_status import run_tool
from asrkit.config import to_dict
from asrkit.decode.options import FULL_CONTEXT_ONLY
from asrkit.config_files import input_digests
from asrkit.trained_model import TrainedModel, open_experiment
from asrkit.export import export_model
from asrkit.export.runtime_features import UnexportableModel, export_feature_refusal
from asrkit.files import UnwritableDestination, check_destination

log = logging.getLogger("asrkit.export")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.add_argument("--output", required=True, help="TorchScript archive to write, e.g. exp/x/final.zip")
    return p


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The options of the export tools that name the model and how it is checked (read by
    :func:`load_for_export`): ``--config``, ``--checkpoint``, ``--override``,
    ``--num_threads``, ``--no_verify``."""
    p.add_argument("--config", required=True, help="the experiment's train.yaml")
    p.add_argument("--checkpoint", required=True, help="checkpoint (training checkpoint or bare state_dict)")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config value (repeatable), e.g. tokenizer_conf.symbol_table_path=...")
    p.add_argument("--num_threads", type=int, default=1,
                   help="intra-op threads (0: torch default); one is plenty for export and its check")
    p.add_argument("--no_verify", action="store_true",
                   help="skip the check of the exported model against eager decoding")


def load_for_export(args: argparse.Namespace) -> TrainedModel:
    """The model ``--config``/``--override``/``--checkpoint`` name
    (:func:`asrkit.trained_model.open_experiment`), on the CPU, after ``--num_threads``;
    :class:`UnexportableModel` before the weights are read for a model of features the
    exports cannot take (:func:`asrkit.export.runtime_features.export_feature_refusal`)."""
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    experiment = open_experiment(args.config, args.override)
    refusal = export_feature_refusal(experiment.cfg.dataset_conf.feats_type)
    if refusal:
        raise UnexportableModel(refusal)
    return experiment.load_model(args.checkpoint)


def run(args: argparse.Namespace) -> int:
    check_destination("--output", args.output, folder=False)
    loaded = load_for_export(args)
    cfg, tokenizer, model, feature_cmvn = loaded.cfg, loaded.tokenizer, loaded.model, loaded.feature_cmvn
    config_text = Path(args.config).read_text(encoding="utf-8")
    if args.override:  # store the config the model was built from
        config_text = yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True)
    dc = cfg.dataset_conf
    fb = dc.fbank_conf
    separator = " " if getattr(tokenizer, "split_with_space", False) else ""
    output = Path(args.output)
    summary = export_model(model, list(tokenizer.symbols), output,
                           sample_rate=dc.resample_conf.resample_rate, num_mel_bins=fb.num_mel_bins,
                           frame_length=fb.frame_length, frame_shift=fb.frame_shift, snip_edges=fb.snip_edges,
                           high_freq=fb.high_freq, sample_scale=fb.sample_scale, feature_cmvn=feature_cmvn,
                           unit_separator=separator, config_text=config_text,
                           verify=not args.no_verify, input_digests=input_digests(cfg))
    check = (f"; verified against eager decoding ({', '.join(summary['modes'])}; encoder max |diff| "
             f"{summary['max_abs_diff']:.2g}) in {summary['verify_s']:.1f} s" if "verify_s" in summary else "")
    print(f"exported {output} ({summary['bytes'] / 1e6:.1f} MB, {len(tokenizer.symbols)} units): "
          f"scripted in {summary['script_s']:.1f} s{check}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_tool(run, build_parser().parse_args(argv), log, bad_input=(UnwritableDestination, UnexportableModel))


if __name__ == "__main__":
    sys.exit(main())


def refuse_streaming(args: argparse.Namespace, chunked: bool) -> bool:
    """``--streaming true`` (``export_onnx``) for a model trained with full context only: logged, True."""
    if args.streaming == "true" and not chunked:
        logging.getLogger("asrkit.export_onnx").error(
            "--streaming true: %s; it would stream badly. Train a U2++ model or export with --streaming false",
            FULL_CONTEXT_ONLY)
        return True
    return False
