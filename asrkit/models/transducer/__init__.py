"""The transducer (RNN-T) model family, ``model: transducer`` (WeNet's ``Transducer``).

By concern:

* ``predictor.py``: the predictors (``predictor: rnn | embedding | conv``) and their
  streaming interface (``init_state``, ``forward_step``, ``batch_to_cache`` /
  ``cache_to_batch``) that training and the searches share;
* ``joint.py``: the joint network (``joint: transducer_joint``), raw logits ``[B, T, U, V]``;
* ``loss.py``: the RNN-T loss (torchaudio's, in fp32), the predictor's ``<blank>``-first
  input, the check that torchaudio can compute the loss;
* ``model.py``: :class:`~asrkit.models.transducer.model.Transducer`, the RNN-T + CTC +
  attention loss dict (on :class:`asrkit.models.AsrModel`'s CTC and attention code);
* ``schema.py``: ``predictor_conf`` and ``joint_conf`` (WeNet's keys and defaults).

The builder is ``asrkit.models.registry.build_transducer`` (``MODELS["transducer"]``).
This package's ``__init__`` imports nothing: ``asrkit.models.schema`` reads ``schema.py``
while ``asrkit.models`` is still being imported.
"""
