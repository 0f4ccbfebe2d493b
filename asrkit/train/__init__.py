"""Training: ``asrkit.train.run(job)`` runs a :class:`asrkit.train.job.TrainJob`."""


def __getattr__(name: str):
    # importing a submodule (asrkit.checkpoint, asrkit.train.agreement, ...) does not
    # import the whole training stack (build, trainer, executor) with it
    if name == "run":
        from asrkit.train.entry import run  # (deferred: the training stack, to first use)
        return run
    raise AttributeError(f"module 'asrkit.train' has no attribute {name!r}")


__all__ = ["run"]
