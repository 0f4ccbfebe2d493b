"""WeNet's websocket protocol (``runtime/core/websocket/websocket_server.cc``), both ways.

Client to server, on path ``/``:

* a text message ``{"signal": "start", "nbest": N, "continuous_decoding": bool}`` opens the
  stream (both fields optional: 1 and false, WeNet's defaults); asrkit also reads
  ``sample_rate`` (Hz, default 16000; 8000-48000 Hz is resampled to the model's rate, another
  is refused: ``asrkit.serve.model``) and
  ``context`` (a list of phrases to bias this stream towards, for models and modes that
  take phrases);
* binary messages: 16-bit little-endian mono PCM (an even number of bytes);
* ``{"signal": "end"}``: no more audio.

Server to client, text messages:

* ``{"status": "ok", "type": "server_ready"}`` after ``start``;
* ``{"status": "ok", "type": "partial_result", "nbest": NBEST}`` while a segment is decoded;
* ``{"status": "ok", "type": "final_result", "nbest": NBEST}`` at each endpoint and at the end;
* ``{"status": "ok", "type": "speech_end"}`` after the last final result (then the server
  closes the connection);
* ``{"status": "failed", "message": "..."}`` for a message the protocol does not allow; the
  server then closes the connection.

``NBEST`` is a JSON *string* holding an array of ``{"sentence": ...}``, at most ``nbest`` of
them, best first (WeNet serialises the array into a string inside the message); in final
results each entry also carries
``word_pieces``: ``[{"word": ..., "start": ms, "end": ms}]``, times in milliseconds of audio
since the stream started.  This module only builds and reads the messages; it knows no model.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Optional, Sequence

from asrkit.transcribe.result import WordTime

DEFAULT_SAMPLE_RATE = 16000
MAX_NBEST = 10
MAX_CONTEXT_PHRASES = 200
MAX_PHRASE_CHARS = 100


class ProtocolError(ValueError):
    """A client message the protocol does not allow (its text is the ``failed`` message)."""


@dataclasses.dataclass(frozen=True)
class Start:
    nbest: int = 1
    continuous_decoding: bool = False
    sample_rate: int = DEFAULT_SAMPLE_RATE
    context: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class End:
    pass


def parse_text(message: str) -> Start | End:
    """The signal of a text message; :class:`ProtocolError` for anything else (WeNet's
    messages where WeNet has one)."""
    try:
        obj = json.loads(message)
    except (ValueError, RecursionError):
        raise ProtocolError("Wrong protocol: a text message must be a JSON object") from None
    if not isinstance(obj, dict):
        raise ProtocolError("Wrong protocol: a text message must be a JSON object")
    if "signal" not in obj:
        raise ProtocolError("Wrong message header: no signal")
    signal = obj["signal"]
    if signal == "end":
        return End()
    if signal != "start":
        raise ProtocolError("Unexpected signal type")
    nbest = obj.get("nbest", 1)
    if isinstance(nbest, bool) or not isinstance(nbest, int):
        raise ProtocolError("integer is expected for nbest option")
    if not 1 <= nbest <= MAX_NBEST:
        raise ProtocolError(f"nbest must be in [1, {MAX_NBEST}], got {nbest}")
    continuous = obj.get("continuous_decoding", False)
    if not isinstance(continuous, bool):
        raise ProtocolError("boolean true or false is expected for continuous_decoding option")
    rate = obj.get("sample_rate", DEFAULT_SAMPLE_RATE)
    if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
        raise ProtocolError(f"a positive integer is expected for sample_rate, got {rate!r}")
    return Start(nbest, continuous, rate, _context(obj.get("context", [])))


def _context(value) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ProtocolError("a list of strings is expected for context")
    if len(value) > MAX_CONTEXT_PHRASES or any(len(p) > MAX_PHRASE_CHARS for p in value):
        raise ProtocolError(f"context: at most {MAX_CONTEXT_PHRASES} phrases of at most "
                            f"{MAX_PHRASE_CHARS} characters")
    phrases = tuple(p.strip() for p in value if p.strip())
    return phrases


def pcm_samples_count(data: bytes) -> int:
    """Samples in a binary message; :class:`ProtocolError` for an odd number of bytes."""
    if len(data) % 2:
        raise ProtocolError(f"binary messages are 16-bit PCM: an even number of bytes, got {len(data)}")
    return len(data) // 2


def _message(**fields) -> str:
    return json.dumps(fields, ensure_ascii=False)


def server_ready() -> str:
    return _message(status="ok", type="server_ready")


def speech_end() -> str:
    return _message(status="ok", type="speech_end")


def failed(message: str) -> str:
    return _message(status="failed", message=message)


def partial_result(sentences: Sequence[str]) -> str:
    return _message(status="ok", type="partial_result",
                    nbest=json.dumps([{"sentence": s} for s in sentences], ensure_ascii=False))


def final_result(sentences: Sequence[str], words: Sequence[Optional[Sequence[WordTime]]]) -> str:
    """``sentences[i]`` with the word times ``words[i]`` (seconds; ``None``: no times, an
    empty list of word pieces)."""
    nbest = [{"sentence": s, "word_pieces": [{"word": w.word, "start": int(round(w.start * 1000)),
                                              "end": int(round(w.end * 1000))} for w in (ws or [])]}
             for s, ws in zip(sentences, words)]
    return _message(status="ok", type="final_result", nbest=json.dumps(nbest, ensure_ascii=False))
