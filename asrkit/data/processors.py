"""The per-sample processing chain: :class:`ListEntry` -> sample dict (or :class:`Skip`),
and the padding collate to the batch dict.

A sample dict carries ``key``, ``txt``, ``tokens: list[int]``, ``wav: Tensor[1, T]``
float32, ``sample_rate``, ``feat: Tensor[frames, mel]`` float32.  Each step is a small
pure function ``step(sample, generator) -> sample`` configured with
``functools.partial`` from ``dataset_conf``; :func:`build_sample_processor` composes
them once:

    load -> tokenize -> resample (+ down-mix at load) -> filter -> speed perturb
    -> reverberation -> additive noise -> band limit -> volume -> features (fbank with dither, or
    Whisper's log-mel: ``feats_type``, :mod:`asrkit.data.feature_steps`) -> CMVN (optional)
    -> SpecAugment -> spec_sub -> spec_trim

**Skips.**  A step that meets a data fault raises :class:`asrkit.data.audio.DataFault`;
:class:`SampleProcessor` turns it into a :class:`Skip` (key, reason, detail) -- the one
path every dropped sample takes.  Only ``DataFault`` is caught: any other exception
(a TypeError from a bug) propagates and fails the run.  :class:`SkipStats` counts skips
per reason and logs each skipped key once (logger ``asrkit.data``).

**Randomness.**  With ``train=True`` the speed, the dither noise and the masks are drawn,
in that order, from :func:`sample_generator` (seed, epoch, key): the same utterance is
augmented identically in the same epoch from a raw list or a shard, in any worker,
before or after a resume.  Reverberation, noise, band limit and volume (``asrkit.data.reverb``,
``asrkit.data.noise``, ``asrkit.data.bandwidth``) draw from generators of their own, (seed, epoch, key, step name):
switching one on or off changes no other draw.  ``train=False`` draws nothing and
augments nothing.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import logging
from typing import Callable, Optional, Sequence, Union

import torch

from asrkit.data import audio, augment, bandwidth, features, noise, quantization, reverb
from asrkit.data.audio import DataFault
from asrkit.data.buckets import padded_length
from asrkit.data.feature_steps import feature_step
from asrkit.data.lists import ListEntry
from asrkit.data.noise_lists import AudioCache, read_audio_list

logger = logging.getLogger("asrkit.data")

Sample = dict
Step = Callable[[Sample, Optional[torch.Generator]], Sample]


# ----------------------------------------------------------------------------- skips


@dataclasses.dataclass(frozen=True)
class Skip:
    """A sample dropped for a data fault: its ``key``, a short ``reason`` label and a
    human-readable ``detail``."""

    key: str
    reason: str
    detail: str


class SkipStats:
    """Counts skips per reason (call :meth:`reset` at each epoch start) and logs every
    skipped key at WARNING level the first time it is added (over the whole life of the
    object, so a bad utterance is logged once, not once per epoch)."""

    def __init__(self):
        self._counts: collections.Counter = collections.Counter()
        self._logged: set[tuple[str, str]] = set()

    def add(self, skip: Skip) -> None:
        self._counts[skip.reason] += 1
        if (skip.key, skip.reason) not in self._logged:
            self._logged.add((skip.key, skip.reason))
            logger.warning("skipped %s (%s): %s", skip.key, skip.reason, skip.detail)

    @property
    def counts(self) -> dict[str, int]:
        """Skips per reason since the last :meth:`reset`."""
        return dict(self._counts)

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    def reset(self) -> None:
        """Zero the counts (keys already logged stay logged)."""
        self._counts.clear()

    def reasons(self) -> str:
        """``"2 missing_file, 1 too_long"``: the counts per reason, by reason (``""`` when none)."""
        return ", ".join(f"{n} {reason}" for reason, n in sorted(self._counts.items()))

    def summary(self) -> str:
        """``"3 skipped: 2 missing_file, 1 too_long"`` (``"0 skipped"`` when none)."""
        if not self._counts:
            return "0 skipped"
        return f"{self.total} skipped: {self.reasons()}"


def sample_generator(seed: int, epoch: int, key: str, stream: str = "") -> torch.Generator:
    """A CPU generator seeded from (seed, epoch, key) through BLAKE2b, identical in every
    process and Python run (Python's ``hash()`` is salted per process); a ``stream`` name
    gives a step a sequence of its own."""
    text = f"{seed}\x1f{epoch}\x1f{key}" + (f"\x1f{stream}" if stream else "")
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    gen = torch.Generator()
    gen.manual_seed(int.from_bytes(digest, "little") & ((1 << 63) - 1))
    return gen


def draw_speed(seed: int, epoch: int, key: str, speeds: Sequence[float]) -> float:
    """The speed-perturbation factor of utterance ``key`` in ``epoch``: uniform over
    ``speeds``, a pure function of (seed, epoch, key) (BLAKE2b, like
    :func:`sample_generator` but its own stream).  The sampler calls it too, so epochs are
    planned on the lengths the utterances really get."""
    digest = hashlib.blake2b(f"{seed}\x1f{epoch}\x1f{key}\x1fspeed".encode("utf-8"), digest_size=8).digest()
    return float(speeds[int.from_bytes(digest, "little") % len(speeds)])


# ----------------------------------------------------------------------------- steps


def load(entry: ListEntry) -> Sample:
    """The sample of ``entry``: ``key``, ``txt``, mono ``wav`` ``[1, T]`` and ``sample_rate``."""
    wav, sample_rate = audio.load_audio(entry)
    return {"key": entry.key, "txt": entry.txt, "wav": wav, "sample_rate": sample_rate}


def tokenize(sample: Sample, generator, *, tokenizer) -> Sample:
    """Adds ``tokens``.  Faults: ``empty_transcript`` (no symbols), ``untokenizable_transcript``
    (every symbol unknown to the units)."""
    tokens = tokenizer.encode(sample["txt"])
    if not tokens:
        raise DataFault("empty_transcript", f"{sample['key']}: transcript {sample['txt']!r} has no units")
    if all(t == tokenizer.unk_id for t in tokens):
        raise DataFault("untokenizable_transcript",
                        f"{sample['key']}: no symbol of {sample['txt']!r} is in the units")
    sample["tokens"] = tokens
    return sample


def no_tokens(sample: Sample, generator) -> Sample:
    """Adds empty ``tokens`` whatever the transcript (none, empty, or one the units cannot
    spell): decoding reads the audio alone; a transcript is for scoring, which compares text."""
    sample["tokens"] = []
    return sample


def resample(sample: Sample, generator, *, resample_rate: int) -> Sample:
    """Resamples ``wav`` to ``resample_rate`` Hz when it differs."""
    if sample["sample_rate"] != resample_rate:
        sample["wav"] = audio.resample(sample["wav"], sample["sample_rate"], resample_rate)
        sample["sample_rate"] = resample_rate
    return sample


def filter_lengths(sample: Sample, generator, *, max_length: float, min_length: float,
                   token_max_length: int, token_min_length: int, min_output_input_ratio: float,
                   max_output_input_ratio: float) -> Sample:
    """Faults ``too_short``/``too_long`` (10 ms frames outside [min_length, max_length]),
    ``too_few_tokens``/``too_many_tokens``, ``token_frame_ratio`` (tokens / frames outside
    [min_output_input_ratio, max_output_input_ratio])."""
    frames = sample["wav"].shape[1] / sample["sample_rate"] * 100
    tokens = len(sample["tokens"])
    key = sample["key"]
    if frames < min_length:
        raise DataFault("too_short", f"{key}: {frames:.0f} frames < min_length {min_length:g}")
    if frames > max_length:
        raise DataFault("too_long", f"{key}: {frames:.0f} frames > max_length {max_length:g}")
    if tokens < token_min_length:
        raise DataFault("too_few_tokens", f"{key}: {tokens} tokens < token_min_length {token_min_length}")
    if tokens > token_max_length:
        raise DataFault("too_many_tokens", f"{key}: {tokens} tokens > token_max_length {token_max_length}")
    if frames > 0 and not min_output_input_ratio <= tokens / frames <= max_output_input_ratio:
        raise DataFault("token_frame_ratio", f"{key}: {tokens} tokens / {frames:.0f} frames outside "
                        f"[{min_output_input_ratio:g}, {max_output_input_ratio:g}]")
    return sample


def speed_perturb(sample: Sample, generator, *, speeds: Sequence[float], seed: int) -> Sample:
    """Plays ``wav`` at the speed :func:`draw_speed` gives this sample in its epoch."""
    speed = draw_speed(seed, sample["epoch"], sample["key"], speeds)
    sample["wav"] = audio.speed_perturb(sample["wav"], sample["sample_rate"], speed)
    return sample


def add_reverb(sample: Sample, generator, *, rirs: AudioCache, prob: float, seed: int) -> Sample:
    """Convolves ``wav`` with a drawn room impulse response (``asrkit.data.reverb``)."""
    gen = sample_generator(seed, sample["epoch"], sample["key"], "reverb")
    sample["wav"] = reverb.add_reverb(sample["wav"], sample["sample_rate"], gen, rirs=rirs, prob=prob)
    return sample


def add_noise(sample: Sample, generator, *, noises: AudioCache, prob: float, snr_range: tuple[float, float],
              seed: int) -> Sample:
    """Adds a drawn noise at a drawn SNR (``asrkit.data.noise``)."""
    gen = sample_generator(seed, sample["epoch"], sample["key"], "noise")
    sample["wav"] = noise.add_noise(sample["wav"], sample["sample_rate"], gen, noises=noises, prob=prob,
                                    snr_range=snr_range)
    return sample


def limit_bandwidth(sample: Sample, generator, *, rates: Sequence[int], prob: float, seed: int) -> Sample:
    """Passes ``wav`` through a drawn narrower band (``asrkit.data.bandwidth``)."""
    gen = sample_generator(seed, sample["epoch"], sample["key"], "band_limit")
    sample["wav"] = bandwidth.limit_bandwidth(sample["wav"], sample["sample_rate"], gen, rates=rates, prob=prob)
    return sample


def requantize(sample: Sample, generator, *, bits: Sequence[int], prob: float, seed: int) -> Sample:
    """Rounds ``wav`` to a drawn sample depth (``asrkit.data.quantization``)."""
    gen = sample_generator(seed, sample["epoch"], sample["key"], "requantize")
    sample["wav"] = quantization.requantize(sample["wav"], gen, bits=bits, prob=prob)
    return sample


def perturb_volume(sample: Sample, generator, *, prob: float, scale_low: float, scale_high: float,
                   log_uniform: bool = False,
                   seed: int) -> Sample:
    """Scales ``wav`` by a drawn factor (``asrkit.data.noise``)."""
    gen = sample_generator(seed, sample["epoch"], sample["key"], "volume")
    sample["wav"] = noise.perturb_volume(sample["wav"], gen, prob=prob, scale_low=scale_low,
                                         scale_high=scale_high, log_uniform=log_uniform)
    return sample


def cmvn(sample: Sample, generator, *, mean: torch.Tensor, istd: torch.Tensor) -> Sample:
    """Normalizes ``feat`` with global CMVN."""
    sample["feat"] = features.apply_cmvn(sample["feat"], mean, istd)
    return sample


def spec_aug(sample: Sample, generator, **conf) -> Sample:
    sample["feat"] = augment.spec_aug(sample["feat"], generator, **conf)
    return sample


def spec_sub(sample: Sample, generator, **conf) -> Sample:
    sample["feat"] = augment.spec_sub(sample["feat"], generator, **conf)
    return sample


def spec_trim(sample: Sample, generator, **conf) -> Sample:
    sample["feat"] = augment.spec_trim(sample["feat"], generator, **conf)
    return sample


# ----------------------------------------------------------------------------- chain


class SampleProcessor:
    """``processor(entry, epoch) -> sample dict | Skip``: the configured chain of steps.
    Picklable (DataLoader workers receive a copy)."""

    def __init__(self, steps: Sequence[Step], *, train: bool, seed: int, feat_dim: int):
        self.steps = list(steps)
        self.train = train
        self.seed = seed
        self.feat_dim = feat_dim

    def __call__(self, entry: ListEntry, epoch: int) -> Union[Sample, Skip]:
        generator = sample_generator(self.seed, epoch, entry.key) if self.train else None
        try:
            sample = load(entry)
            sample["epoch"] = epoch
            for step in self.steps:
                sample = step(sample, generator)
        except DataFault as fault:
            return Skip(entry.key, fault.reason, fault.detail)
        return sample

    def collate(self, samples: Sequence[Union[Sample, Skip]], pad_to: tuple[int, int] | None = None) -> dict:
        """:func:`collate` with this chain's feature dimension (for empty batches)."""
        return collate(samples, feat_dim=self.feat_dim, pad_to=pad_to)


def build_sample_processor(dataset_conf, tokenizer, *, train: bool, seed: int,
                           apply_filter: bool = True, labels: bool = True, cmvn_stats=None) -> SampleProcessor:
    """The chain ``dataset_conf`` (a :class:`asrkit.data.schema.ProcessorKeys`, e.g. the
    ``dataset_conf`` of the root config) describes.

    The feature step is :func:`asrkit.data.feature_steps.feature_step` (``feats_type``).
    ``train=False`` (CV, decoding): no speed perturbation, reverberation, noise, band limit or
    volume change, no dither, no SpecAugment / spec_sub / spec_trim.  ``apply_filter=False`` (decoding: every test utterance must be
    scored) drops the length filter; empty or unreadable input is still skipped.
    ``labels=False`` (decoding) reads no transcript: :func:`no_tokens` instead of
    :func:`tokenize`, so unlabelled entries and empty transcripts decode too.
    When ``cmvn_file`` is set, its statistics are ``cmvn_stats`` (``(mean, istd)``, as
    ``asrkit.config_files.ModelInputs.data_cmvn`` holds them) or, without them, loaded here once.
    """
    conf = dataset_conf
    steps: list[Step] = [functools.partial(tokenize, tokenizer=tokenizer) if labels else no_tokens,
                         functools.partial(resample, resample_rate=conf.resample_conf.resample_rate)]
    if apply_filter:
        fc = conf.filter_conf
        steps.append(functools.partial(
            filter_lengths, max_length=fc.max_length, min_length=fc.min_length,
            token_max_length=fc.token_max_length, token_min_length=fc.token_min_length,
            min_output_input_ratio=fc.min_output_input_ratio,
            max_output_input_ratio=fc.max_output_input_ratio))
    if train and conf.speed_perturb:
        steps.append(functools.partial(speed_perturb, speeds=tuple(conf.speeds), seed=seed))
    if train:
        steps += waveform_augmentation(conf, seed)
    steps.append(feature_step(conf, train))
    if conf.cmvn_file:
        mean, istd = cmvn_stats if cmvn_stats is not None else features.load_cmvn(conf.cmvn_file, conf.feat_dim)
        steps.append(functools.partial(cmvn, mean=mean, istd=istd))
    if train:
        if conf.spec_aug:
            sa = conf.spec_aug_conf
            steps.append(functools.partial(spec_aug, num_t_mask=sa.num_t_mask, num_f_mask=sa.num_f_mask,
                                           max_t=sa.max_t, max_f=sa.max_f, max_t_fraction=sa.max_t_fraction))
        if conf.spec_sub:
            steps.append(functools.partial(spec_sub, num_t_sub=conf.spec_sub_conf.num_t_sub,
                                           max_t=conf.spec_sub_conf.max_t))
        if conf.spec_trim:
            steps.append(functools.partial(spec_trim, max_t=conf.spec_trim_conf.max_t))
    return SampleProcessor(steps, train=train, seed=seed, feat_dim=conf.feat_dim)


def waveform_augmentation(conf, seed: int) -> list[Step]:
    """The reverberation, noise, band-limit, volume and requantization steps ``conf`` switches on, their lists read
    here (``asrkit.data.noise_lists.AudioListError`` for a list that cannot be used)."""
    steps: list[Step] = []
    if conf.reverb:
        rc = conf.reverb_conf
        rirs = AudioCache(read_audio_list(rc.rir_scp, "dataset_conf.reverb_conf.rir_scp"), "unreadable_rir")
        steps.append(functools.partial(add_reverb, rirs=rirs, prob=rc.rir_apply_prob, seed=seed))
    if conf.noise:
        nc = conf.noise_conf
        noises = AudioCache(read_audio_list(nc.noise_scp, "dataset_conf.noise_conf.noise_scp"), "unreadable_noise")
        steps.append(functools.partial(add_noise, noises=noises, prob=nc.noise_apply_prob,
                                       snr_range=noise.db_range(nc.noise_db_range), seed=seed))
    if conf.band_limit:
        bc = conf.band_limit_conf
        steps.append(functools.partial(limit_bandwidth, rates=tuple(bc.rates), prob=bc.band_limit_apply_prob,
                                       seed=seed))
    if conf.volume_perturb:
        vc = conf.volume_perturb_conf
        steps.append(functools.partial(perturb_volume, prob=vc.volume_apply_prob, scale_low=vc.scale_low,
                                       scale_high=vc.scale_high, log_uniform=vc.scale_distribution == "log_uniform",
                                       seed=seed))
    if conf.requantize:  # (after the gain: a device quantizes what reaches it)
        qc = conf.requantize_conf
        steps.append(functools.partial(requantize, bits=tuple(qc.bits), prob=qc.requantize_apply_prob, seed=seed))
    return steps


# ----------------------------------------------------------------------------- collate


def collate(samples: Sequence[Union[Sample, Skip]], feat_dim: int = 80, pad_to: tuple[int, int] | None = None) -> dict:
    """Pad samples into the batch dict, keeping their order:

    ``keys: list[str]``, ``feats: [B, T, F]`` float32 (zero-padded), ``feats_lengths: [B]``
    int64, ``target: [B, L]`` int64 (padded with -1), ``target_lengths: [B]`` int64, and
    ``skipped: list[Skip]`` -- the :class:`Skip` items found among ``samples`` (they are
    not part of the batch; the caller counts them).

    An empty input (or only skips) gives a B=0 batch: ``feats`` ``[0, 0, feat_dim]``,
    ``target`` ``[0, 0]``.  ``feat_dim`` is only used then; otherwise F comes from the
    samples, which must agree.

    ``pad_to``: (frames, target length) the batch is padded to (a ``bucket_frames``
    batch's bucket edges; a longer batch gets ``asrkit.data.buckets.padded_length``).
    """
    skipped = [s for s in samples if isinstance(s, Skip)]
    kept = [s for s in samples if not isinstance(s, Skip)]
    if kept:
        feat_dim = kept[0]["feat"].shape[1]
        for s in kept:
            if s["feat"].dim() != 2 or s["feat"].shape[1] != feat_dim:
                raise ValueError(f"sample {s['key']}: feat shape {list(s['feat'].shape)}, batch has F={feat_dim}")
    feats_lengths = torch.tensor([s["feat"].shape[0] for s in kept], dtype=torch.int64)
    target_lengths = torch.tensor([len(s["tokens"]) for s in kept], dtype=torch.int64)
    max_t = int(feats_lengths.max()) if kept else 0
    max_l = int(target_lengths.max()) if kept else 0
    if pad_to is not None and kept:
        max_t, max_l = padded_length(max_t, pad_to[0]), padded_length(max_l, pad_to[1])
    feats = torch.zeros(len(kept), max_t, feat_dim, dtype=torch.float32)
    target = torch.full((len(kept), max_l), -1, dtype=torch.int64)
    for i, s in enumerate(kept):
        feats[i, :s["feat"].shape[0]] = s["feat"]
        target[i, :len(s["tokens"])] = torch.as_tensor(s["tokens"], dtype=torch.int64)
    return {"keys": [s["key"] for s in kept], "feats": feats, "feats_lengths": feats_lengths,
            "target": target, "target_lengths": target_lengths, "skipped": skipped}
