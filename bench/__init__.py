"""Benchmarks, run as ``python bench/<name>.py`` with the repository root on ``PYTHONPATH``
(see ``tools/__init__.py``) and imported by the tests as ``bench.<name>``."""
