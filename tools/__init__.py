"""The command-line tools, run as ``python tools/<name>.py`` and imported as ``tools.<name>``.

Both need the repository root on ``sys.path``; no script edits ``sys.path`` itself.  The root
is put there by ``PYTHONPATH``, which ``tools/setup_env.sh`` (run.sh, tests/run.sh) and every
recipe's ``path.sh`` export, and by pytest (``tests/`` is a package under the root).  ``bench/``
scripts rely on the same.
"""
