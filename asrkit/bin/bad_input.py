"""What the command-line tools count as bad input: a file the user handed in (config, units,
BPE model, CMVN, checkpoint, data list) that is missing or malformed.  Each tool reports
it in one line and exits with status 2; other failures (a write that failed, a bug) exit 1."""
from __future__ import annotations

from asrkit.config import ConfigError
from asrkit.data.lists import ListError
from asrkit.io.checkpoint import CheckpointError
from asrkit.text.units import UnitsError

BAD_INPUT = (ConfigError, CheckpointError, ListError, UnitsError, FileNotFoundError)
