"""Train a model from a YAML config.

    python -m asrkit.bin.train --config conf/train.yaml --train_data data/train/data.list \\
        --cv_data data/dev/data.list --model_dir exp/conformer [--checkpoint auto|PATH] \\
        [--override optim_conf.lr=0.001 ...]

The arguments become a :class:`asrkit.train.job.TrainJob`, run by
:func:`asrkit.train.run`.  Everything that can be checked is checked before the model is
built: the config (unknown keys, types, unsupported values), the data lists, the
units/BPE/CMVN files and the device/dtype/sync_batchnorm combination.  With several ranks,
they then agree on hashes of the config (less ``launch``), those files and the data lists
(``asrkit.train.agreement``) before any heavy work.  The resolved config is written to
``<model_dir>/train.yaml``.

Exit status: 0 done; 2 refused before training (config, files, device, a
``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` that cannot reach the master, ranks disagreeing,
a malformed data list line, an empty data list, a ``--model_dir`` that is a file, a
``--checkpoint`` that does not load) or void (an epoch in which every sample was skipped as
bad data: "no utterance could be used", and no checkpoint of it); 1 failed (a collective
timed out: the message names the ranks and what they were doing; a checkpoint could not
be written; too many non-finite steps); 3 this rank waited longer than
``launch.timeout_s`` for its data loader; 4 stopped by SIGTERM/SIGINT after saving a
checkpoint at an optimizer-step boundary (``asrkit.train.preemption``): rerun with
``--checkpoint auto`` to continue.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from asrkit.finetune.schema import FinetuneSections, LoraConf
from asrkit.train.entry import end_with, run
from asrkit.train.job import LaunchFlags, ModuleInit, TrainJob, WarmStart


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="training config (YAML)")
    p.add_argument("--train_data", required=True, nargs="+", metavar="LIST[:WEIGHT]",
                   help="train data.list (raw or shard list); several: every utterance of each once per epoch, "
                        "or with weights (a.list:0.7 b.list:0.3) sampled in that proportion per epoch")
    p.add_argument("--cv_data", required=True, nargs="+", metavar="LIST",
                   help="CV data.list (raw or shard list); several: each reported apart, the CV loss over all")
    p.add_argument("--model_dir", required=True, help="experiment directory")
    p.add_argument("--checkpoint", default=None,
                   help="'auto': resume from the newest valid checkpoint in model_dir (start fresh if "
                        "none); a path: resume from that checkpoint (a model-only or WeNet checkpoint: start "
                        "a fine-tuning run from its weights, as WeNet's --checkpoint)")
    p.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config value (repeatable), e.g. optim_conf.lr=0.001")
    p.add_argument("--num_threads", type=int, default=0,
                   help="intra-op threads per process (0: this node's cores / processes per node)")
    p.add_argument("--max_steps", type=int, default=None,
                   help="stop after this many optimizer steps in total, saving a checkpoint")
    p.add_argument("--tensorboard_dir", default=None, help="default: <model_dir>/tensorboard")
    p.add_argument("--enc_init", default=None, metavar="CHECKPOINT",
                   help="start from the modules --enc_init_mods of this checkpoint or averaged model (e.g. "
                        "the encoder of a char model); the rest is freshly initialised. A resumed run "
                        "(--checkpoint) restores its own weights instead")
    p.add_argument("--enc_init_mods", default="encoder.",
                   help="comma-separated parameter-name prefixes taken from --enc_init (default: encoder.)")
    tune = p.add_argument_group(
        "fine-tuning (docs/training.md): each flag sets the config key of its name, after --override; "
        "booleans take true/false (a bare flag is true)")
    tune.add_argument("--freeze_modules", type=_names, default=None, metavar="PREFIX[,PREFIX...]",
                      help="parameter-name prefixes not to train (e.g. encoder.)")
    tune.add_argument("--reinit_output_layers", type=_bool, nargs="?", const=True, default=None, metavar="BOOL",
                      help="start the vocabulary-sized layers afresh (a changed units file)")
    tune.add_argument("--use_lora", type=_bool, nargs="?", const=True, default=None, metavar="BOOL",
                      help="LoRA adapters on the layers lora_conf names")
    tune.add_argument("--only_optimize_lora", type=_bool, nargs="?", const=True, default=None, metavar="BOOL",
                      help="train the adapters alone")
    for name, kind, what in (("lora_modules", _names, "module lists to adapt (default encoder.encoders)"),
                             ("lora_attn_attr", _names, "their attention modules (default self_attn,src_attn)"),
                             ("lora_list", _names, "their linears (default linear_out,linear_q,linear_k,linear_v)"),
                             ("lora_rank", int, "adapter rank (default 8)"),
                             ("lora_alpha", float, "scale numerator: s = alpha / rank (default 8)"),
                             ("lora_dropout", float, "dropout on the adapters' input (default 0)"),
                             ("lora_ckpt_path", str, "start the adapters from this LoRA checkpoint's"),
                             ("lora_reinit", _bool, "non-zero adapters, weights offset to match (default false)")):
        extra = dict(nargs="?", const=True) if kind is _bool else {}
        tune.add_argument(f"--{name}", type=kind, default=None, help=f"lora_conf.{name}: {what}", **extra)
    engine = p.add_argument_group(
        "training engine (WeNet's flags; docs/distributed.md): each flag sets the config key of its name, "
        "after --override")
    engine.add_argument("--train_engine", default=None, choices=["torch_ddp", "torch_fsdp"],
                        help="torch_ddp: the model on every rank; torch_fsdp: sharded over the ranks (FSDP2)")
    engine.add_argument("--fsdp_sharding_strategy", default=None, choices=["no_shard", "model", "zero2", "zero3"],
                        help="torch_fsdp's units and resharding (default zero2)")
    engine.add_argument("--fsdp_cpu_offload", type=_bool, nargs="?", const=True, default=None, metavar="BOOL",
                        help="keep the shards on the host (CUDA only)")
    engine.add_argument("--fsdp_sync_module_states", type=_bool, nargs="?", const=True, default=None,
                        metavar="BOOL", help="broadcast rank 0's weights before sharding")
    warm = p.add_argument_group(
        "warm start (a curriculum: first train on an easier list, e.g. one clean voice, then on "
        "--train_data from that model)")
    warm.add_argument("--warm_start_data", default=None, metavar="LIST",
                      help="when the run starts fresh, first train on this list in <model_dir>/warm_start")
    warm.add_argument("--warm_start_steps", type=int, default=0,
                      help="optimizer steps of the warm start (required with --warm_start_data)")
    warm.add_argument("--warm_start_override", action="append", default=[], metavar="KEY.PATH=VALUE",
                      help="config overrides for the warm start only, after --override "
                           "(e.g. scheduler_conf.warmup_steps=250)")
    warm.add_argument("--warm_start_mods", default="encoder.,decoder.,ctc.",
                      help="parameter-name prefixes the main run takes from the warm start's model "
                           "(default: encoder.,decoder.,ctc.)")
    legacy = p.add_argument_group(
        "legacy launch (one process per GPU started by a shell loop); ignored under torchrun, whose "
        "environment takes precedence; these flags take precedence over the config's launch section")
    legacy.add_argument("--rank", type=int, default=None, help="global rank of this process")
    legacy.add_argument("--world_size", type=int, default=None, help="number of processes in the job")
    legacy.add_argument("--local_rank", type=int, default=None, help="GPU index on this node (default: rank)")
    legacy.add_argument("--init_method", default=None, help="tcp://host:port, env:// or file:///path")
    legacy.add_argument("--dist_backend", default=None, choices=["auto", "gloo", "nccl"])
    return p


def _bool(text: str) -> bool:
    """A real boolean (WeNet parses its LoRA switches with ``type=bool``, so there ``False``
    is true)."""
    value = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def _names(text: str) -> list[str]:
    """A comma-separated list of names (WeNet's form of its list flags)."""
    return [part.strip() for part in text.split(",") if part.strip()]


# flag -> config key: a flag for every fine-tuning key (the schema is the list; a key without
# its flag above fails in finetune_overrides, on every run)
FINETUNE_FLAGS = {**{f.name: f.name for f in dataclasses.fields(FinetuneSections) if f.name != "lora_conf"},
                  **{f.name: f"lora_conf.{f.name}" for f in dataclasses.fields(LoraConf)}}


# flag -> config key of the training-engine flags (WeNet's names)
ENGINE_FLAGS = {k: k for k in ("train_engine", "fsdp_sharding_strategy", "fsdp_cpu_offload", "fsdp_sync_module_states")}


def finetune_overrides(args: argparse.Namespace) -> list[str]:
    """The config overrides the fine-tuning and engine flags given set (JSON values: valid YAML)."""
    return [f"{key}={json.dumps(getattr(args, flag))}" for flag, key in {**FINETUNE_FLAGS, **ENGINE_FLAGS}.items()
            if getattr(args, flag) is not None]


def _one_or_all(items: list[str]) -> str | tuple[str, ...]:
    return items[0] if len(items) == 1 else tuple(items)


def job_from_args(args: argparse.Namespace) -> TrainJob:
    """The :class:`TrainJob` the parsed arguments describe."""
    warm = (WarmStart(args.warm_start_data, args.warm_start_steps, tuple(args.warm_start_override),
                      args.warm_start_mods) if args.warm_start_data else None)
    return TrainJob(
        config=args.config, train_data=_one_or_all(args.train_data), cv_data=_one_or_all(args.cv_data),
        model_dir=Path(args.model_dir),
        overrides=(*args.override, *finetune_overrides(args)), checkpoint=args.checkpoint, max_steps=args.max_steps,
        num_threads=args.num_threads, tensorboard_dir=args.tensorboard_dir,
        init=ModuleInit(args.enc_init, args.enc_init_mods) if args.enc_init else None, warm_start=warm,
        launch=LaunchFlags(args.rank, args.world_size, args.local_rank, args.init_method, args.dist_backend))


def main(argv=None) -> int:
    return run(job_from_args(build_parser().parse_args(argv)))


if __name__ == "__main__":
    end_with(main)  # (not sys.exit: asrkit.train.entry.exit_process says why)
