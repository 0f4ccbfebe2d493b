"""The attention context each training micro-batch uses: WeNet's dynamic- and static-chunk
training (U2/U2++), drawn deterministically.

A *chunk choice* is the pair ``(chunk_size, num_left_chunks)`` that
:meth:`asrkit.models.asr_model.AsrModel.forward` passes to ``encode``.  ``chunk_size`` 0
is full context.  ``chunk_size`` c > 0 cuts the encoder frames (after subsampling) into
chunks of c frames counted from the utterance's first frame; a frame attends to the frames
of its own chunk and of the ``num_left_chunks`` chunks before it, all of them when
``num_left_chunks`` is −1 (WeNet's ``subsequent_chunk_mask``).

Keys (``encoder_conf``, WeNet's meaning; ``asrkit.models.schema.EncoderConf`` refuses the
combinations WeNet silently ignores):

* ``use_dynamic_chunk: true``: a chunk choice is drawn for every training micro-batch
  (:func:`draw`); CV uses full context ``(0, -1)``.
* ``use_dynamic_left_chunk: true`` (with ``use_dynamic_chunk``): a drawn chunk also draws
  its number of left chunks; without it every chunk sees all left chunks (−1).
* ``static_chunk_size: c > 0`` (without ``use_dynamic_chunk``): ``(c, -1)`` for every
  batch, in training and in CV.
* none of them: full context ``(0, -1)`` everywhere.

The draw, WeNet's and asrkit's
    WeNet (``add_optional_chunk_mask``) draws ``x`` uniform in ``1 .. max_len − 1`` where
    ``max_len`` is the batch's longest encoder length: full context when
    ``x > max_len // 2`` (about half the batches), else chunk ``x mod 25 + 1`` (1–25 frames,
    at most 1 s of audio at 40 ms per frame); with dynamic left chunks it draws
    ``num_left_chunks`` uniform in ``0 .. (max_len − 1) // chunk − 1``.  It uses torch's
    global generator and a rank's own ``max_len``, so ranks draw differently and the draw
    depends on the batch.  asrkit's draw has the same intent with no input from the data or
    from a generator's state: for ``(seed, step, index)`` let ``w0, w1, w2`` be the first
    three 64-bit big-endian words of ``SHA-256("asrkit-chunk <seed> <step> <index>")``
    (decimal integers, single spaces); then

    * full context ``(0, -1)`` when ``w0`` is even (probability 1/2),
    * else ``chunk_size = 1 + w1 mod 25`` (uniform in 1–25) and ``num_left_chunks =
      w2 mod ((LEFT_REFERENCE_FRAMES − 1) // chunk_size)`` with ``use_dynamic_left_chunk``
      (uniform in ``0 ..`` that bound ``− 1``: WeNet's rule with ``max_len`` replaced by the
      fixed :data:`LEFT_REFERENCE_FRAMES`), −1 without.

    (The moduli are below 2^8, so the words' remainders are uniform to within 2^-56.)

``seed`` is the config's ``seed``, ``step`` the optimizer steps applied before the
micro-batch's accumulation group (``TrainState.step``: a skipped non-finite step draws
again what it drew), ``index`` the micro-batch's **global index in its group**,
:func:`micro_batch_index`: ``(position mod accum_grad) · world_size + rank``.  No rank's
data or generator state enters a draw: the group's ``accum_grad · world_size`` chunk choices
form one table, the same on every rank, and each rank uses its own entries.  Since rank ``r`` trains
the plan batches ``r, r + W, r + 2W, ...`` (``asrkit.data.sampler``), the index is the plan
batch's place in the group's global batch: every world size ``W`` and ``accum_grad`` A with
the same product ``W · A`` give each plan batch the same chunk choice (2 ranks with
``accum_grad`` 2 train every batch with the chunk that 1 rank with ``accum_grad`` 4 gives
it), and a run resumed at (step, position) draws what the uninterrupted run drew.
"""
from __future__ import annotations

import dataclasses
import hashlib

FULL_CONTEXT = (0, -1)
MAX_DYNAMIC_CHUNK = 25       # WeNet's bound: 25 frames of 40 ms = 1 s of look-ahead at most
LEFT_REFERENCE_FRAMES = 125  # stands in for WeNet's max_len in the left-chunk draw: 5 s at 40 ms


def _words(seed: int, step: int, index: int) -> tuple[int, int, int]:
    digest = hashlib.sha256(f"asrkit-chunk {seed} {step} {index}".encode("ascii")).digest()
    return tuple(int.from_bytes(digest[8 * i:8 * i + 8], "big") for i in range(3))  # type: ignore[return-value]


def draw(seed: int, step: int, index: int, dynamic_left: bool) -> tuple[int, int]:
    """The dynamic chunk choice ``(chunk_size, num_left_chunks)`` of micro-batch ``index``
    in the group of optimizer step ``step`` (the rule in the module docstring)."""
    w0, w1, w2 = _words(seed, step, index)
    if w0 % 2 == 0:
        return FULL_CONTEXT
    chunk = 1 + w1 % MAX_DYNAMIC_CHUNK
    if not dynamic_left:
        return chunk, -1
    return chunk, w2 % ((LEFT_REFERENCE_FRAMES - 1) // chunk)


def micro_batch_index(position: int, accum_grad: int, rank: int, world_size: int) -> int:
    """The global index, in its accumulation group, of the micro-batch at ``position`` of
    rank ``rank``'s epoch: ``(position mod accum_grad) · world_size + rank``."""
    return (position % accum_grad) * world_size + rank


@dataclasses.dataclass(frozen=True)
class ChunkTraining:
    """The chunk choices of one run: :meth:`for_training` per micro-batch,
    :meth:`for_evaluation` for CV (see the module docstring)."""

    use_dynamic_chunk: bool = False
    use_dynamic_left_chunk: bool = False
    static_chunk_size: int = 0
    seed: int = 0

    @classmethod
    def from_config(cls, cfg) -> "ChunkTraining":
        """From a ``TrainConfig``: its ``encoder_conf`` keys and its ``seed``."""
        conf = cfg.encoder_conf
        return cls(conf.use_dynamic_chunk, conf.use_dynamic_left_chunk, conf.static_chunk_size, cfg.seed)

    @property
    def chunked(self) -> bool:
        """Trained with chunks (dynamic or static): the model's attention was limited to
        chunks, so it can stream and its CTC spikes stay near the sound they emit."""
        return bool(self.use_dynamic_chunk or self.static_chunk_size > 0)

    def for_training(self, step: int, index: int) -> tuple[int, int]:
        """The chunk choice of the training micro-batch ``index`` (:func:`micro_batch_index`)
        of the group that optimizer step ``step`` will apply."""
        if self.use_dynamic_chunk:
            return draw(self.seed, step, index, self.use_dynamic_left_chunk)
        return self.for_evaluation()

    def for_evaluation(self) -> tuple[int, int]:
        """The chunk choice of CV: the static chunk with all left chunks, else full context."""
        if self.static_chunk_size > 0 and not self.use_dynamic_chunk:
            return self.static_chunk_size, -1
        return FULL_CONTEXT
