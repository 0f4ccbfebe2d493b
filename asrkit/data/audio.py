"""Audio: load an utterance (file, segment of a file, or tar member), down-mix,
resample, speed-perturb.

Every data fault met while loading (missing file, unreadable or truncated audio, empty
audio, a segment outside its file, a shard list that no longer matches its tar, a tar
member that is a link or has an unsafe name) raises
:class:`DataFault` with a short ``reason``; the processor chain turns it into a counted
skip.  Anything else (a programming error) propagates.
"""
from __future__ import annotations

import io
import os
import struct
from typing import BinaryIO, Optional

import numpy as np
import soundfile
import torch
import torchaudio

from asrkit.data.lists import AUDIO_EXTENSIONS, ListEntry, unsafe_member_name

TAR_BLOCK = 512
_HEAD_BYTES = 4096  # enough to hold the RIFF chunks before "data" in ordinary wav files


class DataFault(Exception):
    """A fault of the data (not of the code): ``reason`` is a short stable label used for
    counting (``missing_file``, ``unreadable_audio``, ...), ``detail`` a human message."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def wav_truncation(head: bytes, total_size: int) -> Optional[str]:
    """For RIFF/WAVE bytes whose first bytes are ``head`` and whose full length is
    ``total_size``: a message when the ``data`` chunk declares more bytes than the file
    holds, else ``None`` (also for non-WAV data, or a streaming size of 0 / 0xFFFFFFFF,
    or a ``data`` chunk beyond ``head``)."""
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    pos = 12
    while pos + 8 <= len(head):
        chunk, size = head[pos:pos + 4], struct.unpack_from("<I", head, pos + 4)[0]
        if chunk == b"data":
            if size in (0, 0xFFFFFFFF):
                return None
            have = total_size - (pos + 8)
            return None if size <= have else f"header declares {size} data bytes, only {have} present"
        pos += 8 + size + (size & 1)
    return None


def _decode(source: BinaryIO, name: str, start: Optional[float], end: Optional[float]) -> tuple[np.ndarray, int]:
    """Samples ``[frames, channels]`` float32 of ``source`` (optionally cut to
    ``start``..``end`` seconds) and the sample rate."""
    try:
        with soundfile.SoundFile(source) as f:
            sr = f.samplerate
            first = 0 if start is None else int(round(start * sr))
            last = f.frames if end is None else int(round(end * sr))
            if start is not None or end is not None:
                if first >= f.frames or last > f.frames + 1:
                    raise DataFault("segment_out_of_range",
                                    f"{name}: segment {start}..{end} s outside its {f.frames / sr:.3f} s")
                last = min(last, f.frames)
                f.seek(first)
            data = f.read(last - first, dtype="float32", always_2d=True)
    except soundfile.LibsndfileError as e:
        raise DataFault("unreadable_audio", f"{name}: {e}") from None
    if data.shape[0] < last - first:
        raise DataFault("truncated_audio", f"{name}: read {data.shape[0]} of {last - first} frames")
    return data, sr


def _read_file(entry: ListEntry) -> tuple[np.ndarray, int]:
    path = entry.wav
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise DataFault("missing_file", f"{path} does not exist") from None
    except OSError as e:
        raise DataFault("unreadable_audio", f"{path}: {e}") from None
    with f:
        truncated = wav_truncation(f.read(_HEAD_BYTES), os.fstat(f.fileno()).st_size)
        if truncated:
            raise DataFault("truncated_audio", f"{path}: {truncated}")
        f.seek(0)
        return _decode(f, path, entry.start, entry.end)


_REGULAR_FILE = (b"0", b"\0")
_TAR_TYPES = {b"1": "a hard link", b"2": "a symbolic link", b"3": "a character device", b"4": "a block device",
              b"5": "a directory", b"6": "a FIFO"}


def _is_tar_header(block: bytes) -> bool:
    """Whether ``block`` is a tar header: its checksum field matches and its size is octal."""
    if len(block) < TAR_BLOCK:
        return False
    try:
        stored = int(block[148:156].rstrip(b"\0 ").decode("ascii") or "-1", 8)
        int(block[124:136].rstrip(b"\0 ").decode("ascii") or "0", 8)
    except ValueError:
        return False
    return stored == sum(block[:148]) + 8 * 32 + sum(block[156:TAR_BLOCK])


def _tar_member_fault(header: bytes, key: str, size: int) -> Optional[DataFault]:
    """The fault of the tar header block in front of member ``<key>.wav`` of ``size``
    bytes, or ``None`` when it describes exactly that, as a regular file:

    * ``unsafe_tar_member``: the key or the header's name is absolute, has a ``..``
      component (:func:`asrkit.data.lists.unsafe_member_name`), or the member is a link,
      device or directory rather than a regular file;
    * ``shard_mismatch``: another size, or a name other than ``<key>.<ext>`` with ``ext``
      in ``asrkit.data.lists.AUDIO_EXTENSIONS`` (the shard list is stale).  The name is
      compared when ``<key>.flac`` fits the header's 100-byte name field (longer names
      live in a pax record before it)."""
    unsafe = unsafe_member_name(key)
    if unsafe:
        return DataFault("unsafe_tar_member", f"key {key!r}: {unsafe}")
    if not _is_tar_header(header):
        return DataFault("shard_mismatch", "no tar header at offset - 512")
    kind = header[156:157]
    if kind not in _REGULAR_FILE:
        what = _TAR_TYPES.get(kind, f"of tar type {kind!r}")
        return DataFault("unsafe_tar_member", f"member for {key!r} is {what}, not a regular file")
    declared = int(header[124:136].rstrip(b"\0 ").decode("ascii") or "0", 8)
    name = header[:100].split(b"\0", 1)[0]
    prefix = header[345:500].split(b"\0", 1)[0] if header[257:262] == b"ustar" else b""
    full = (prefix + b"/" + name if prefix else name).decode("utf-8", "replace")
    unsafe = unsafe_member_name(full)
    if unsafe:
        return DataFault("unsafe_tar_member", f"member name {full!r}: {unsafe}")
    if declared != size:
        return DataFault("shard_mismatch", f"tar header gives size {declared}, list gives {size}")
    stem, _, ext = full.rpartition(".")
    if len(f"{key}.flac".encode("utf-8")) <= 100 and not (stem == key and ext in AUDIO_EXTENSIONS):
        return DataFault("shard_mismatch", f"tar member is {full!r}, list expects {key + '.wav'!r} "
                                           f"(or another audio extension)")
    return None


def _read_tar_member(entry: ListEntry) -> tuple[np.ndarray, int]:
    where = f"{entry.tar}@{entry.offset}"
    try:
        f = open(entry.tar, "rb")
    except FileNotFoundError:
        raise DataFault("missing_file", f"{entry.tar} does not exist") from None
    except OSError as e:
        raise DataFault("unreadable_audio", f"{entry.tar}: {e}") from None
    with f:
        f.seek(entry.offset - TAR_BLOCK)
        blob = f.read(TAR_BLOCK + entry.size)
    if len(blob) < TAR_BLOCK + entry.size:
        raise DataFault("truncated_audio", f"{where}: tar ends {TAR_BLOCK + entry.size - len(blob)} bytes short")
    fault = _tar_member_fault(blob[:TAR_BLOCK], entry.key, entry.size)
    if fault:
        raise DataFault(fault.reason, f"{where}: {fault.detail}")
    data = blob[TAR_BLOCK:]
    truncated = wav_truncation(data[:_HEAD_BYTES], len(data))
    if truncated:
        raise DataFault("truncated_audio", f"{where}: {truncated}")
    return _decode(io.BytesIO(data), where, None, None)


def load_audio(entry: ListEntry) -> tuple[torch.Tensor, int]:
    """Waveform ``[1, T]`` float32 in [-1, 1) and sample rate of ``entry``: the file
    (cut to ``start``..``end``) or the tar member.  Multi-channel audio is down-mixed
    by averaging the channels.  Raises :class:`DataFault` on data faults, including
    ``empty_audio`` for zero samples."""
    data, sr = _read_tar_member(entry) if entry.is_shard_member else _read_file(entry)
    if data.shape[0] == 0:
        raise DataFault("empty_audio", f"{entry.key}: no samples")
    mono = data[:, 0] if data.shape[1] == 1 else data.mean(axis=1, dtype=np.float32)
    return torch.from_numpy(np.ascontiguousarray(mono)).unsqueeze(0), sr


_RESAMPLERS: dict[tuple[int, int], torchaudio.transforms.Resample] = {}


def resampler(orig_rate: int, new_rate: int) -> torchaudio.transforms.Resample:
    """The resampler of a rate pair (torchaudio's default Hann-windowed sinc filter), built
    once per process: the one filter every path resamples with -- :func:`resample` and the
    streaming :class:`asrkit.stream.resample.StreamResampler`."""
    pair = (int(orig_rate), int(new_rate))
    found = _RESAMPLERS.get(pair)
    if found is None:
        found = _RESAMPLERS[pair] = torchaudio.transforms.Resample(*pair)
    return found


def resample(wav: torch.Tensor, orig_rate: int, new_rate: int) -> torch.Tensor:
    """``wav`` ``[C, T]`` resampled from ``orig_rate`` to ``new_rate`` Hz with
    :func:`resampler`'s filter."""
    if orig_rate == new_rate:
        return wav
    return resampler(orig_rate, new_rate)(wav)


def speed_perturb(wav: torch.Tensor, sample_rate: int, speed: float) -> torch.Tensor:
    """``wav`` played ``speed`` times as fast (tempo and pitch together, like sox
    ``speed``): resampled from ``round(sample_rate * speed)`` to ``sample_rate``, so the
    output has about ``T / speed`` samples.  ``speed == 1`` returns ``wav`` itself."""
    if speed == 1.0:
        return wav
    return resample(wav, int(round(sample_rate * speed)), sample_rate)
