"""Noise and room-impulse-response lists, read as the corpora ship them, and the per-process
cache of their audio (``asrkit.data.noise`` and ``asrkit.data.reverb`` draw from them).

Accepted line formats (one file may mix them; blank lines and ``#`` comments are skipped):

* **path per line** -- ``/data/musan/noise/free-sound/noise-free-sound-0000.wav``;
* **Kaldi / ESPnet ``wav.scp``** -- ``<id> <path>``, the path to the line's end (spaces
  kept, as asrkit's ``wav.scp``; a path-per-line list cannot hold spaces) (what ESPnet's ``noise_scp`` and
  ``rir_scp`` are, and the ``wav.scp`` Kaldi's ``make_musan.sh`` writes for MUSAN);
* **Kaldi RIRS_NOISES** -- ``--rir-id <id> --room-id <id> [...] <path>`` (``rir_list`` of
  ``simulated_rirs/*`` and ``real_rirs_isotropic_noises``) and ``--noise-id <id>
  --noise-type <t> --bg-fg-type <t> [...] <path>`` (``pointsource_noises/noise_list``):
  ``--option value`` pairs, then the path.

A relative path is taken from the list's folder or the nearest folder above it where the
list's first relative path exists (RIRS_NOISES lists name ``RIRS_NOISES/simulated_rirs/...``
from the folder that holds ``RIRS_NOISES``), else from the current directory when it exists
there (a Kaldi recipe's ``wav.scp``), else from the list's folder.  Kaldi's
command pipes (``sox ... |``) are refused: convert such entries to files first.

:func:`read_audio_list` raises :class:`AudioListError` (one line: the file, the line number
and what is wrong) for a missing or empty list or a malformed line; training's preflight
reports it before anything is built.  A listed file that cannot be read is found only when
a sample draws it: :class:`AudioCache` raises ``asrkit.data.audio.DataFault`` then, which
the sample chain counts and logs as a skip (reason ``unreadable_noise`` / ``unreadable_rir``).
"""
from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Optional

import numpy as np
import soundfile
import torch

from asrkit.data import audio
from asrkit.data.audio import DataFault


class AudioListError(ValueError):
    """A noise/RIR list that cannot be used (one line naming the file and the line)."""


@dataclasses.dataclass(frozen=True)
class AudioItem:
    """One listed recording: its ``id`` (the path when the line gives none) and ``path``."""

    id: str
    path: str


_KALDI_ID_OPTIONS = ("--rir-id", "--noise-id")


def parse_line(line: str) -> tuple[Optional[str], str]:
    """``(id or None, path)`` of one list line (module docstring); raises ``ValueError``
    with what is wrong."""
    fields = line.split()
    if fields[-1] == "|" or line.rstrip().endswith("|"):
        raise ValueError("a command pipe ('... |'); asrkit reads audio files only -- write the audio to files "
                         "(e.g. with sox) and list them")
    if fields[0].startswith("--"):
        options, path = fields[:-1], fields[-1]
        if len(options) % 2 or not all(o.startswith("--") for o in options[::2]) or path.startswith("--"):
            raise ValueError("a Kaldi RIRS_NOISES line needs '--option value' pairs followed by the path")
        pairs = dict(zip(options[::2], options[1::2]))
        ids = [pairs[o] for o in _KALDI_ID_OPTIONS if o in pairs]
        return (ids[0] if ids else None), path
    if len(fields) == 1:
        return None, fields[0]
    key, rest = line.strip().split(maxsplit=1)  # wav.scp: the id, then the path to the line's end (spaces kept)
    return key, rest


def _anchor(list_path: Path, relative: str) -> Path:
    """The folder relative paths of ``list_path`` are taken from (module docstring)."""
    for folder in (list_path.parent, *list_path.parent.parents, Path.cwd()):
        if (folder / relative).exists():
            return folder
    return list_path.parent


def read_audio_list(path: str | Path, what: str = "noise list") -> list[AudioItem]:
    """The items of list ``path`` (module docstring), in file order; :class:`AudioListError`
    when the list is missing, unreadable, empty, or has a malformed line.  ``what`` names
    the list in messages (e.g. ``dataset_conf.noise_conf.noise_scp``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AudioListError(f"{what} {path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AudioListError(f"{what} {path}: cannot be read ({e})") from None
    items: list[AudioItem] = []
    anchor: Optional[Path] = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            item_id, item_path = parse_line(line)
        except ValueError as e:
            raise AudioListError(f"{what} {path} line {number}: {e}: {line.strip()[:120]!r}") from None
        if not Path(item_path).is_absolute():
            anchor = anchor or _anchor(path, item_path)
            item_path = str(anchor / item_path)
        items.append(AudioItem(item_id or item_path, item_path))
    if not items:
        raise AudioListError(f"{what} {path}: the list is empty (no audio line)")
    return items


# ----------------------------------------------------------------------------- audio cache


def read_mono(path: str, sample_rate: int, reason: str) -> torch.Tensor:
    """The first channel of audio file ``path`` as float32 ``[T]`` at ``sample_rate`` Hz
    (resampled when it differs; Kaldi's reverberation takes a multi-channel RIR's first
    channel, ``remix 1``).  ``DataFault(reason)`` when it cannot be read or is empty."""
    try:
        data, sr = soundfile.read(path, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, OSError, RuntimeError) as e:
        raise DataFault(reason, f"{path}: {e}") from None
    if data.shape[0] == 0:
        raise DataFault(reason, f"{path}: no samples")
    wav = torch.from_numpy(np.ascontiguousarray(data[:, 0]))
    if sr != sample_rate:
        wav = audio.resample(wav.unsqueeze(0), sr, sample_rate).squeeze(0)
    return wav


class AudioCache:
    """Listed recordings loaded on first use and kept, least recently used first out, up to
    ``max_bytes`` (per process: each DataLoader worker holds its own).  A recording larger
    than the whole budget is read each time it is drawn.  Picklable before first use."""

    def __init__(self, items: list[AudioItem], reason: str, max_bytes: int = 256 << 20):
        self.items = items
        self.reason = reason
        self.max_bytes = max_bytes
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self.items)

    def get(self, index: int, sample_rate: int) -> torch.Tensor:
        """Recording ``index`` as float32 ``[T]`` at ``sample_rate`` (see :func:`read_mono`)."""
        key = (index, sample_rate)
        wav = self._cache.get(key)
        if wav is not None:
            self._cache.move_to_end(key)
            return wav
        wav = read_mono(self.items[index].path, sample_rate, self.reason)
        size = wav.numel() * 4
        if size <= self.max_bytes:
            while self._cache and self._bytes + size > self.max_bytes:
                _, old = self._cache.popitem(last=False)
                self._bytes -= old.numel() * 4
            self._cache[key] = wav
            self._bytes += size
        return wav

    def __getstate__(self):  # workers start with an empty cache
        return {**self.__dict__, "_cache": collections.OrderedDict(), "_bytes": 0}
