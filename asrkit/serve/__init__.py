"""``asrkit serve``: a streaming recognition server (docs/serve.md), by concern:

* :mod:`asrkit.serve.protocol` -- WeNet's websocket protocol: the client's messages read,
  the server's built (no model, no I/O);
* :mod:`asrkit.serve.session` -- one stream's recognition state: chunk by chunk
  (:class:`~asrkit.serve.session.ChunkSession`) or endpointed segments decoded whole
  (:class:`~asrkit.serve.session.SegmentSession`);
* :mod:`asrkit.serve.model` -- the model the streams share, the server's decoding settings
  (:class:`~asrkit.serve.model.ServeSettings`), which kind of session it gets, uploads;
* :mod:`asrkit.serve.http` -- the plain HTTP side of the port (uploads' bodies, limits) inside
  the ``websockets`` server;
* :mod:`asrkit.serve.server` -- :class:`~asrkit.serve.server.RecognitionServer`: the port,
  the decoding pool, the streams' message loop, limits and shutdown;
* :mod:`asrkit.serve.chunk_batcher` -- streams' chunks run through the encoder together
  (``--max_batch``, ``--batch_window_ms``);
* :mod:`asrkit.serve.page` -- the page: microphone (AudioWorklet) and file upload.

From Python::

    import asyncio, asrkit
    from asrkit.serve import RecognitionServer, ServedModel
    served = ServedModel(asrkit.load_model("exp/u2pp"))
    asyncio.run(RecognitionServer(served, port=10086).run_until_signal())
"""
from asrkit.serve.model import ServedModel, ServeSettings, SessionError, SettingsError
from asrkit.serve.server import RecognitionServer, ServerLimits

__all__ = ["RecognitionServer", "ServeSettings", "ServedModel", "ServerLimits", "SessionError", "SettingsError"]
