"""``asrkit doctor`` (also ``asrkit-doctor``): the preflight to run on every node, with the
multi-node options the recipe takes, before a multi-node job::

    asrkit doctor --num_nodes 2 --node_rank 0 --master_addr 10.0.0.1 --master_port 29500
                                               # on node 0; --node_rank 1 on node 1, ...

Run it in the recipe directory: without --config/--train_data/--cv_data it checks the job
the recipe's stage 4 trains (its run.sh's train_config and data lists,
``asrkit.doctor.recipe``).  --master_addr/--master_port, when not given, come from
MASTER_ADDR/MASTER_PORT in the environment, else torchrun's defaults.
Every line is ``OK|WARN|FAIL check: what [-> fix]`` (docs/doctor.md explains each one);
the exit status is 0 when no line is FAIL (warnings allowed), 2 otherwise, and 2 with one
``error:`` line for unusable options.  Checks, in order: versions, network, config and
files, the master port, then -- all nodes meeting at the master port, each waiting at most
``--timeout_s`` for the others, with a line on stderr every 10 s of a wait -- agreement
(same versions, config and file hashes) and a gloo all-reduce across the nodes with its
latency and bandwidth.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from asrkit.doctor.recipe import RecipeError, complete_job
from asrkit.doctor.checkup import DoctorJob, run_checks

SUMMARY = "preflight for a multi-node job: versions, network, master port, all-reduce, data files"


def configure(p: argparse.ArgumentParser) -> None:
    # The launch options default to the environment's MASTER_ADDR/MASTER_PORT, else torchrun's
    # own defaults (one node, 127.0.0.1:29500); the files to those of the recipe in the
    # current directory (asrkit.doctor.recipe), as its stage 4 passes them.
    launch = p.add_argument_group("the job (the recipe's options of the same names)")
    launch.add_argument("--num_nodes", type=int, default=1)
    launch.add_argument("--node_rank", type=int, default=0, help="this node: 0..num_nodes-1")
    launch.add_argument("--master_addr", default=None,
                        help="node 0's address, as every node reaches it (default: $MASTER_ADDR, else 127.0.0.1; "
                             "the option takes precedence)")
    launch.add_argument("--master_port", type=int, default=None,
                        help="the recipe's master port, free on node 0; the doctor's nodes meet there (default: "
                             "$MASTER_PORT, else 29500; the option takes precedence)")
    files = p.add_argument_group("what the training will read (default: what the recipe in this directory passes)")
    files.add_argument("--config", "--train_config", dest="config", default=None,
                       help="training config (YAML), the recipe's train_config (default: read from ./run.sh, "
                            "else tools/recipe_defaults.sh)")
    files.add_argument("--override", action="append", default=[], metavar="KEY.PATH=VALUE",
                       help="config override (repeatable), as the recipe's train_overrides")
    files.add_argument("--train_data", default=None,
                       help="train list, as the recipe's stage 4 passes it (default: data/train/data.list, "
                            "data.shards.list when run.sh sets data_type=shard)")
    files.add_argument("--cv_data", default=None,
                       help="CV list, as stage 4 passes it (default: data/dev/data.list, or data.shards.list)")
    files.add_argument("--audio_entries", type=int, default=3, help="entries per list whose audio is loaded")
    net = p.add_argument_group("waiting and measuring")
    net.add_argument("--timeout_s", type=float, default=300.0,
                     help="the longest each wait for the other nodes lasts (master port, check-in, all-reduce)")
    net.add_argument("--sizes_mb", default="1,4,16,64", help="all-reduce sizes in MB (10^6 bytes), comma-separated")
    net.add_argument("--repeats", type=int, default=5, help="timed all-reduces per size (the median is shown)")
    net.add_argument("--min_bandwidth_mb_s", type=float, default=100.0,
                     help="WARN when the largest size's bus bandwidth is under this (MB/s)")


def complete_args(args: argparse.Namespace) -> Optional[str]:
    """Fill the options left out (master address/port from the environment, the job from
    the recipe in this directory) in ``args``, noting on stderr what the recipe gave; the
    reason when they cannot be found (None when they are)."""
    # (deferred: it imports torch, which must load after run() set TORCH_CPP_LOG_LEVEL)
    from asrkit.doctor.port import EndpointError, master_endpoint
    try:
        args.master_addr, args.master_port = master_endpoint(args.master_addr, args.master_port, os.environ)
        job, found = complete_job(args.config, args.train_data, args.cv_data)
    except (EndpointError, RecipeError) as e:
        return str(e)
    args.config, args.train_data, args.cv_data = job.config, job.train_data, job.cv_data
    if found:
        values = {"--config": job.config, "--train_data": job.train_data, "--cv_data": job.cv_data}
        print("doctor: the recipe's run.sh gives " + " ".join(f"{flag} {values[flag]}" for flag in found),
              file=sys.stderr)
    return None


def option_problem(args: argparse.Namespace) -> Optional[str]:
    """Why the options cannot describe a job (None when they can)."""
    if args.num_nodes < 1:
        return f"--num_nodes {args.num_nodes}: must be at least 1"
    if not 0 <= args.node_rank < args.num_nodes:
        return f"--node_rank {args.node_rank} is outside 0..{args.num_nodes - 1} (--num_nodes {args.num_nodes})"
    if not 1 <= args.master_port <= 65535:
        return f"--master_port {args.master_port}: must be 1..65535"
    if args.timeout_s <= 0:
        return f"--timeout_s {args.timeout_s:g}: must be positive"
    if args.repeats < 1 or args.audio_entries < 0:
        return "--repeats must be at least 1 and --audio_entries at least 0"
    if not parse_sizes(args.sizes_mb):
        return f"--sizes_mb {args.sizes_mb!r}: expected positive numbers, comma-separated (e.g. 1,4,16,64)"
    return None


def parse_sizes(text: str) -> list[float]:
    """``"1,4,16"`` -> ``[1.0, 4.0, 16.0]``; ``[]`` unless every item is a positive number."""
    try:
        sizes = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        return []
    return sizes if all(s > 0 for s in sizes) else []


def run(args: argparse.Namespace) -> int:
    if "torch" not in sys.modules:  # (c10d's own warnings on waits and timeouts: read when torch loads)
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    problem = complete_args(args) or option_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return run_checks(job_from_args(args))


def job_from_args(args: argparse.Namespace) -> DoctorJob:
    """The :class:`DoctorJob` the completed, checked options describe."""
    return DoctorJob(num_nodes=args.num_nodes, node_rank=args.node_rank, master_addr=args.master_addr,
                     master_port=args.master_port, config=args.config, train_data=args.train_data,
                     cv_data=args.cv_data, overrides=tuple(args.override), audio_entries=args.audio_entries,
                     timeout_s=args.timeout_s, sizes_mb=tuple(parse_sizes(args.sizes_mb)), repeats=args.repeats,
                     min_bandwidth_mb_s=args.min_bandwidth_mb_s)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="asrkit-doctor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
