"""OpenAI Whisper checkpoint files in asrkit: their layout, the WeNet config for their
dimensions, and their parameter names mapped to :class:`asrkit.models.whisper.WhisperModel`'s.

An OpenAI file (``tiny.pt`` ... ``large-v3.pt``, ``*.en.pt``) is ``torch.save({"dims":
{...}, "model_state_dict": {...}})``, the tensors fp16.  ``dims`` holds ``n_mels``,
``n_vocab``, ``n_audio_ctx`` (1500), ``n_audio_state``, ``n_audio_head``,
``n_audio_layer``, ``n_text_ctx`` (448), ``n_text_state``, ``n_text_head``,
``n_text_layer``.  Every key of the state dict is accounted for (one missing or extra is
refused, naming it):

* ``encoder.conv1`` / ``conv2`` -> ``encoder.embed.conv.0`` / ``.2`` (WeNet's names);
* ``encoder.positional_embedding [1500, D]`` -> ``encoder.embed.pos_enc.pe [1, 1500, D]``
  (the file's table, loaded as it is);
* ``{encoder,decoder}.blocks.<i>.`` -> ``encoder.encoders.<i>.`` / ``decoder.decoders.<i>.``,
  in them ``attn.{query,key,value,out}`` -> ``self_attn.linear_{q,k,v,out}``,
  ``cross_attn.*`` -> ``src_attn.*`` (same four), ``attn_ln`` -> ``norm1``;
  ``cross_attn_ln`` -> ``norm2``; ``mlp_ln`` -> ``norm2`` (encoder) / ``norm3`` (decoder);
  ``mlp.0`` / ``mlp.2`` -> ``feed_forward.w_1`` / ``w_2``;
* ``encoder.ln_post`` -> ``encoder.after_norm``, ``decoder.ln`` -> ``decoder.after_norm``;
* ``decoder.token_embedding.weight`` -> ``decoder.embed.weight`` (and, tied, the output
  layer's weight); the output layer's bias, which Whisper does not have, is zero;
* ``decoder.positional_embedding [448, D]`` -> ``decoder.pos_enc.pe [1, 448, D]``.

Tensors are converted to float32 (fp16 -> fp32 is exact).

WeNet's converter writes the same float32 tensors under WeNet's names
(``decoder.embed.0.weight``, ``decoder.embed.1.pe``: :mod:`asrkit.checkpoint.wenet` maps
them) and leaves out the output layer and the CTC head; asrkit loads its ``final.pt`` as
the model :func:`convert_openai_file` writes (:func:`with_converted_heads`).
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Optional

import torch
import yaml

from asrkit.checkpoint.load import CheckpointError, check_keys, read_weights_only
from asrkit.checkpoint.save import save_checkpoint
from asrkit.files import atomic_write_text
from asrkit.models.decoder import WHISPER_TEXT_POSITIONS
from asrkit.models.schema import DecoderConf, EncoderConf
from asrkit.models.whisper import WhisperAsrModel, WhisperModel, build_whisper
from asrkit.schema import build
from asrkit.text.whisper import WHISPER_TOKENS, special_token_names

DIMS = ("n_mels", "n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
        "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer")
# the encoder's positions: Whisper's 30 s of 10 ms frames after the 2x convolution
AUDIO_POSITIONS = 1500

_BLOCK = {"attn.query": "self_attn.linear_q", "attn.key": "self_attn.linear_k",
          "attn.value": "self_attn.linear_v", "attn.out": "self_attn.linear_out",
          "cross_attn.query": "src_attn.linear_q", "cross_attn.key": "src_attn.linear_k",
          "cross_attn.value": "src_attn.linear_v", "cross_attn.out": "src_attn.linear_out",
          "attn_ln": "norm1", "cross_attn_ln": "norm2", "mlp.0": "feed_forward.w_1",
          "mlp.2": "feed_forward.w_2"}
_BLOCK_KEY = re.compile(r"^(encoder|decoder)\.blocks\.(\d+)\.(.+)\.(weight|bias)$")
_PLAIN = {"encoder.conv1.weight": "encoder.embed.conv.0.weight", "encoder.conv1.bias": "encoder.embed.conv.0.bias",
          "encoder.conv2.weight": "encoder.embed.conv.2.weight", "encoder.conv2.bias": "encoder.embed.conv.2.bias",
          "encoder.ln_post.weight": "encoder.after_norm.weight", "encoder.ln_post.bias": "encoder.after_norm.bias",
          "decoder.ln.weight": "decoder.after_norm.weight", "decoder.ln.bias": "decoder.after_norm.bias",
          "decoder.token_embedding.weight": "decoder.embed.weight"}
_TABLES = {"encoder.positional_embedding": "encoder.embed.pos_enc.pe",
           "decoder.positional_embedding": "decoder.pos_enc.pe"}
# the seed of a converted model's CTC head (convert_openai_file's default; WeNet's converter output)
CONVERTED_CTC_SEED = 0
log = logging.getLogger("asrkit.checkpoint")


def read_openai_file(path: str | Path) -> tuple[dict, dict]:
    """``(dims, state)`` of an OpenAI Whisper file, read by
    :func:`asrkit.checkpoint.load.read_weights_only` (whose refusals it raises: missing,
    corrupted, carrying pickled objects); :class:`CheckpointError` (one line, naming
    ``path``) when it is not that layout, or when its dimensions are not a Whisper model asrkit builds (``n_audio_ctx``
    1500, ``n_text_ctx`` 448, one model size for encoder and decoder)."""
    loaded = read_weights_only(path)
    if not isinstance(loaded, dict) or not {"dims", "model_state_dict"} <= set(loaded):
        keys = sorted(loaded) if isinstance(loaded, dict) else type(loaded).__name__
        raise CheckpointError(f"{path}: not an OpenAI Whisper file (want keys 'dims' and 'model_state_dict', "
                              f"got {keys})")
    dims = dict(loaded["dims"])
    missing = [k for k in DIMS if not isinstance(dims.get(k), int)]
    if missing:
        raise CheckpointError(f"{path}: dims lacks integer {', '.join(missing)}")
    for key, want in (("n_audio_ctx", AUDIO_POSITIONS), ("n_text_ctx", WHISPER_TEXT_POSITIONS),
                      ("n_text_state", dims["n_audio_state"])):
        if dims[key] != want:
            raise CheckpointError(f"{path}: dims {key} is {dims[key]}; asrkit's Whisper needs {want}")
    return {k: dims[k] for k in DIMS}, dict(loaded["model_state_dict"])


def wenet_config(dims: dict) -> dict:
    """The ``train.yaml`` WeNet's converter
    (``wenet/models/whisper/convert_whisper_to_wenet_config_and_ckpt.py``) writes for
    ``dims``: every key and value of it, in its order, so that asrkit's conversion and
    WeNet's read alike (``tests/models/whisper/test_wenet_converter.py`` compares them with
    the converter's output, ``tests/fixtures/wenet/whisper/``).  The model:
    ``input_dim``/``output_dim``, ``encoder: transformer`` (``conv1d2``,
    ``abs_pos_whisper``, ``key_bias: false``, gelu, ``gradient_checkpointing: true``,
    ``static_chunk_size: -1``), ``decoder: transformer`` (``embed_learnable_pe``,
    ``tie_word_embedding``, ``key_bias`` and ``src_key_bias`` false), ``model: whisper``
    (``ctc_weight`` 0.3, ``lsm_weight`` 0.1), ``ctc_conf.ctc_blank_id`` ``<|nospeech|>``;
    ``tokenizer: whisper`` with ``is_multilingual`` (``n_vocab >= 51865``),
    ``num_languages`` (``n_vocab − 51765 − is_multilingual``), the unread paths as null and
    ``special_tokens``: the ids of :data:`asrkit.text.whisper.WHISPER_TOKENS` (``eot`` is
    ``<|endoftext|>``'s); ``cmvn: null``; and WeNet's training keys for its AISHELL recipe:
    ``dataset_conf`` (log-mel features without padding, filters, SpecAugment, spec_sub,
    dynamic batches, ``language_conf.limited_langs: [zh]`` -- the prompt's language, see
    :func:`asrkit.models.schema.whisper_language`), ``grad_clip``, ``accum_grad``,
    ``max_epoch``, ``log_interval``, Adam and ``warmuplr``.  asrkit reads every one of them
    with WeNet's meaning (``gradient_checkpointing: true``: every block's activations are
    recomputed in the backward while training, ``asrkit.train.engines.activations``)."""
    multilingual = dims["n_vocab"] >= 51865
    num_languages = dims["n_vocab"] - 51765 - int(multilingual)
    names = special_token_names(num_languages)
    eot = dims["n_vocab"] - len(names)
    state, text = dims["n_audio_state"], dims["n_text_state"]
    encoder_conf = {"gradient_checkpointing": True, "input_layer": "conv1d2", "output_size": state,
                    "attention_heads": dims["n_audio_head"], "linear_units": 4 * state,
                    "num_blocks": dims["n_audio_layer"], "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                    "attention_dropout_rate": 0.0, "normalize_before": True, "use_dynamic_chunk": False,
                    "use_dynamic_left_chunk": False, "pos_enc_layer_type": "abs_pos_whisper",
                    "static_chunk_size": -1, "key_bias": False, "activation_type": "gelu"}
    decoder_conf = {"tie_word_embedding": True, "gradient_checkpointing": True,
                    "attention_heads": dims["n_text_head"], "linear_units": 4 * text,
                    "num_blocks": dims["n_text_layer"], "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                    "self_attention_dropout_rate": 0.0, "src_attention_dropout_rate": 0.0,
                    "input_layer": "embed_learnable_pe", "use_output_layer": True, "normalize_before": True,
                    "src_attention": True, "key_bias": False, "src_key_bias": False, "activation_type": "gelu"}
    tokenizer_conf = {"is_multilingual": multilingual, "num_languages": num_languages, "split_with_space": False,
                      "bpe_path": None, "symbol_table_path": None, "non_lang_syms_path": None,
                      "special_tokens": {key: eot + names.index(name) for key, name in WHISPER_TOKENS.items()}}
    dataset_conf = {"filter_conf": {"max_length": 2 * dims["n_audio_ctx"], "min_length": 0,
                                    "token_max_length": dims["n_text_ctx"], "token_min_length": 1},
                    "resample_conf": {"resample_rate": 16000}, "speed_perturb": False,
                    "spec_aug": True, "spec_aug_conf": {"num_t_mask": 2, "num_f_mask": 2, "max_t": 50, "max_f": 10},
                    "spec_sub": True, "spec_sub_conf": {"num_t_sub": 3, "max_t": 30}, "spec_trim": False,
                    "shuffle": True, "shuffle_conf": {"shuffle_size": 1500},
                    "sort": True, "sort_conf": {"sort_size": 500},
                    "feats_type": "log_mel_spectrogram",
                    "log_mel_spectrogram_conf": {"n_fft": 400, "hop_length": 160, "num_mel_bins": dims["n_mels"],
                                                 "padding": 0},
                    "batch_conf": {"batch_type": "dynamic", "batch_size": 26, "max_frames_in_batch": 12000},
                    "language_conf": {"limited_langs": ["zh"]}}
    return {"input_dim": dims["n_mels"], "output_dim": dims["n_vocab"],
            "encoder": "transformer", "encoder_conf": encoder_conf,
            "decoder": "transformer", "decoder_conf": decoder_conf,
            "tokenizer": "whisper", "tokenizer_conf": tokenizer_conf,
            "ctc_conf": {"ctc_blank_id": eot + names.index("<|nospeech|>")},
            "cmvn": None, "cmvn_conf": {"cmvn_file": None, "is_json_cmvn": None},
            "model": "whisper",
            "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False},
            "dataset": "asr", "dataset_conf": dataset_conf,
            "grad_clip": 5, "accum_grad": 4, "max_epoch": 100, "log_interval": 100,
            "optim": "adam", "optim_conf": {"lr": 0.0005},
            "scheduler": "warmuplr", "scheduler_conf": {"warmup_steps": 12000}}


def build_from_config(config: dict, source: str = "config") -> WhisperModel:
    """The :class:`WhisperModel` of a :func:`wenet_config` dict (its ``encoder_conf`` and
    ``decoder_conf`` validated by asrkit's schema: :class:`asrkit.schema.ConfigError` for a
    key asrkit does not implement)."""
    encoder_conf = build(EncoderConf, config["encoder_conf"], f"{source}: encoder_conf")
    decoder_conf = build(DecoderConf, config["decoder_conf"], f"{source}: decoder_conf")
    return build_whisper(config["input_dim"], config["output_dim"], encoder_conf, decoder_conf)


def from_openai_state(state: dict, source: str) -> dict:
    """``state`` (OpenAI's names) under :class:`WhisperModel`'s names, float32, with the
    output layer (:func:`converted_heads`: tied, zero bias); :class:`CheckpointError` naming a
    key it does not know."""
    out: dict = {}
    for name, tensor in state.items():
        tensor = tensor.float()
        match = _BLOCK_KEY.match(name)
        if name in _PLAIN:
            out[_PLAIN[name]] = tensor
        elif name in _TABLES:
            out[_TABLES[name]] = tensor.unsqueeze(0)
        elif match and (match.group(3) in _BLOCK or match.group(3) == "mlp_ln"):
            side, index, part, kind = match.groups()
            new = ("norm2" if side == "encoder" else "norm3") if part == "mlp_ln" else _BLOCK[part]
            out[f"{side}.{'encoders' if side == 'encoder' else 'decoders'}.{index}.{new}.{kind}"] = tensor
        else:
            raise CheckpointError(f"{source}: '{name}' is not a key of an OpenAI Whisper model")
    # (without an embedding, the key check names what is missing)
    return {**out, **converted_heads(out, source)} if "decoder.embed.weight" in out else out


def converted_heads(state: dict, source: str, ctc_shape: Optional[tuple[int, int]] = None,
                    seed: int = CONVERTED_CTC_SEED) -> dict:
    """What a converted Whisper model has that Whisper has not, for ``state`` (asrkit's
    names, holding ``decoder.embed.weight [V, D]``): ``decoder.output_layer.weight`` (the
    embedding: tied), ``decoder.output_layer.bias`` (zero: Whisper's logits have no bias)
    and, with ``ctc_shape`` ``(V, D)``, ``ctc.ctc_lo.weight`` / ``.bias`` at
    ``torch.nn.Linear(D, V)``'s initialisation drawn from a generator seeded with ``seed``
    (the global one untouched; WeNet's training starts its CTC head from its
    initialisation).  :class:`CheckpointError` without the embedding."""
    embedding = state.get("decoder.embed.weight")
    if embedding is None:
        raise CheckpointError(f"{source}: no decoder.embed.weight (WeNet's decoder.embed.0.weight), the token "
                              f"embedding of a Whisper model")
    out = {"decoder.output_layer.weight": embedding,
           "decoder.output_layer.bias": embedding.new_zeros(embedding.size(0))}
    if ctc_shape is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ctc_lo = torch.nn.Linear(ctc_shape[1], ctc_shape[0])
        out.update({f"ctc.ctc_lo.{k}": v.detach() for k, v in ctc_lo.state_dict().items()})
    return out


def with_converted_heads(state: dict, model: torch.nn.Module, source: str) -> dict:
    """``state`` (a WeNet checkpoint under asrkit's names) for ``model``, with
    :func:`converted_heads` added when it is the output of WeNet's Whisper converter: a
    ``model: whisper`` state without any of ``decoder.output_layer.*`` and ``ctc.*`` (WeNet
    loads it with ``strict=False`` and leaves those at their initialisation -- the output
    bias too, random where Whisper's is zero; asrkit's conversion, whose heads these are,
    gives the same model as WeNet's file).  Any other ``state`` is returned as it is."""
    heads = ("decoder.output_layer.", "ctc.")
    if not isinstance(model, WhisperAsrModel) or any(k.startswith(heads) for k in state):
        return state
    target = model.state_dict()
    ctc = target.get("ctc.ctc_lo.weight")
    log.info("%s: WeNet's Whisper converter output: output layer tied to the embedding with a zero bias%s",
             source, f", CTC head initialised from seed {CONVERTED_CTC_SEED}" if ctc is not None else "")
    return {**state, **converted_heads(state, source, None if ctc is None else tuple(ctc.shape))}


def load_openai_whisper(path: str | Path) -> tuple[dict, WhisperModel]:
    """``(config, model)`` of the OpenAI Whisper file ``path``: :func:`wenet_config` of its
    dimensions, and the float32 :class:`WhisperModel` holding its weights, in eval mode.
    :class:`CheckpointError` (one line) for a file that is not that layout, or whose keys or
    shapes are not those of its dimensions (naming the first key that differs)."""
    dims, state = read_openai_file(path)
    config = wenet_config(dims)
    model = build_from_config(config, str(path))
    weights = from_openai_state(state, str(path))
    check_keys(weights, model, f"{path} (dims {dims})")
    model.load_state_dict(weights)
    return config, model.eval()


def convert_openai_file(path: str | Path, out_dir: str | Path, seed: int = CONVERTED_CTC_SEED,
                        init_ctc: bool = False) -> tuple[Path, Path]:
    """WeNet's converter in asrkit: ``(train.yaml, whisper.pt)`` written into ``out_dir`` for
    the OpenAI file ``path``: the :func:`wenet_config` of its dimensions, and an asrkit
    checkpoint (``{"model": state}``, :func:`asrkit.checkpoint.save.save_checkpoint`, with
    its ``whisper.yaml`` record) holding every weight of the ``model: whisper`` that config
    builds (:func:`asrkit.models.registry.build_model`), so that
    :func:`asrkit.checkpoint.weights.load_weights` takes it as it is: the file's tensors
    under asrkit's names (:func:`load_openai_whisper`) and the heads Whisper has not
    (:func:`converted_heads`, the CTC head from ``seed``) -- the model asrkit loads from
    WeNet's converter output (:func:`with_converted_heads`) when ``seed`` is
    :data:`CONVERTED_CTC_SEED`.  ``init_ctc``: the CTC head's weight is then the decoder's
    token embedding (:func:`ctc_from_decoder_embedding`, WeNet's ``wenet_whisper.init-ctc.pt``),
    its bias stays at that initialisation."""
    config, model = load_openai_whisper(path)
    state = dict(model.state_dict())
    if config["model_conf"]["ctc_weight"] > 0.0:
        ctc_shape = (config["output_dim"], config["encoder_conf"]["output_size"])
        state.update(converted_heads(state, str(path), ctc_shape, seed))
        if init_ctc:
            state = ctc_from_decoder_embedding(state)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path, checkpoint_path = out_dir / "train.yaml", out_dir / "whisper.pt"
    atomic_write_text(config_path, yaml.safe_dump(config, sort_keys=False))
    save_checkpoint(checkpoint_path, {"model": state}, {"converted_from": str(path)})
    return config_path, checkpoint_path


def ctc_from_decoder_embedding(state: dict) -> dict:
    """``state`` with the CTC head's weight (``ctc.ctc_lo.weight [V, D]``) a copy of the
    decoder's token embedding (``decoder.embed.weight [V, D]``): WeNet's ``init-ctc``
    (``examples/aishell/whisper/local/modify_ckpt.py --add_list '{"ctc.ctc_lo.weight":
    "decoder.embed.0.weight"}'``), which starts CTC from Whisper's token directions instead
    of random ones.  :class:`CheckpointError` when either is missing or the shapes differ
    (an encoder wider than the decoder)."""
    head, embedding = state.get("ctc.ctc_lo.weight"), state.get("decoder.embed.weight")
    if head is None or embedding is None:
        raise CheckpointError("init-ctc needs a CTC head (ctc_weight > 0) and the decoder's embedding")
    if head.shape != embedding.shape:
        raise CheckpointError(f"init-ctc: the CTC head is {tuple(head.shape)}, the decoder's embedding "
                              f"{tuple(embedding.shape)}")
    return {**state, "ctc.ctc_lo.weight": embedding.clone()}
