"""Distributed training, one module per concern:

* :mod:`~asrkit.train.dist.context` -- who this process is (:class:`DistContext`) and the
  collectives the trainer makes (no-ops with one process);
* :mod:`~asrkit.train.dist.launch` -- resolving the launch (torchrun environment > legacy
  flags > config), joining the process group, DDP wrapping, sync-batchnorm checks;
* :mod:`~asrkit.train.dist.scaling` -- ``accum_grad`` scaling that keeps a reference global batch;
* :mod:`~asrkit.train.dist.comm_hooks` -- the DDP communication hook of ``ddp_conf.comm_hook``
  (fp16/bf16 compression, PowerSGD);
* :mod:`~asrkit.train.dist.monitor` -- each rank's phase and heartbeat, the data-loader
  watchdog, and naming the ranks when a collective fails.

The names below are the package's public interface (``from asrkit.train import dist as D``).
"""
from asrkit.train.dist.comm_hooks import CommHook, comm_hook_problem, register_comm_hook
from asrkit.train.dist.context import DistContext, default_num_threads, no_sync_if, unwrap
from asrkit.train.dist.launch import (LaunchError, LaunchSpec, check_init_method, check_sync_batchnorm,
                                      count_batchnorm, describe, init_distributed, resolve_backend,
                                      resolve_launch, shutdown, wrap_ddp)
from asrkit.train.dist.monitor import (EXIT_STALLED, MonitoredLoader, Phase, RankMonitor, default_store,
                                       is_collective_failure)
from asrkit.train.dist.scaling import round_half_up, scale_accum_grad

__all__ = ["CommHook", "comm_hook_problem", "register_comm_hook",
           "DistContext", "default_num_threads", "no_sync_if", "unwrap",
           "LaunchError", "LaunchSpec", "check_init_method", "check_sync_batchnorm", "count_batchnorm", "describe",
           "init_distributed", "resolve_backend", "resolve_launch", "shutdown", "wrap_ddp",
           "EXIT_STALLED", "MonitoredLoader", "Phase", "RankMonitor", "default_store", "is_collective_failure",
           "round_half_up", "scale_accum_grad"]
