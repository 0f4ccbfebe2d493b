"""asrkit/progress.py: log lines at most every ``every_s`` when stderr is not a terminal
(a bar there would fill a log file with carriage returns), a tqdm bar when it is."""
from __future__ import annotations

import logging
import re

from asrkit.progress import AudioProgress, ProgressReport


def test_not_on_a_terminal_a_log_line_at_most_every_every_s(caplog):
    log = logging.getLogger("asrkit.test_progress")
    with caplog.at_level(logging.INFO, logger=log.name):
        with ProgressReport(10, "decode", "utt", log, every_s=0.0, terminal=False) as report:
            report.advance(4)
            report.advance_to(10)
        assert [r.getMessage() for r in caplog.records] == ["decode: 4/10 utt", "decode: 10/10 utt"]
        caplog.clear()
        with ProgressReport(10, "decode", "utt", log, every_s=3600.0, terminal=False,
                            line=lambda: "custom") as report:
            report.advance(10)
        assert caplog.records == []  # (the first line is due an hour after the start)


def test_on_a_terminal_a_bar_on_stderr(capsys):
    log = logging.getLogger("asrkit.test_progress")
    with ProgressReport(8, "file.wav", "s", log, terminal=True, delay_s=0.0, bar_format=AudioProgress.BAR) as report:
        report.advance_to(8)
    err = capsys.readouterr().err
    assert re.search(r"\rfile\.wav: +\d+%\|.*\| \d/8 s audio", err), err
    assert err.endswith(" \r")  # removed when done (leave=False)
