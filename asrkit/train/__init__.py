"""Training: ``asrkit.train.run(job)`` runs a :class:`asrkit.train.job.TrainJob`."""


def __getattr__(name: str):
    # ``asrkit.train.run`` without importing the whole training stack whenever a submodule
    # (asrkit.train.checkpoint, asrkit.train.agreement, ...) is imported
    if name == "run":
        from asrkit.train.entry import run
        return run
    raise AttributeError(f"module 'asrkit.train' has no attribute {name!r}")


__all__ = ["run"]
