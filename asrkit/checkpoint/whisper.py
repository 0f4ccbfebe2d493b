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
"""
from __future__ import annotations

import re
from pathlib import Path

import torch
import yaml

from asrkit.checkpoint.load import CheckpointError, read_weights_only
from asrkit.checkpoint.save import save_checkpoint
from asrkit.files import atomic_write_text
from asrkit.models.ctc import CTC
from asrkit.models.decoder import WHISPER_TEXT_POSITIONS
from asrkit.models.schema import WHISPER_TOKENS, DecoderConf, EncoderConf
from asrkit.models.whisper import WhisperModel, build_whisper
from asrkit.schema import build
from asrkit.text.whisper import special_token_names

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
    """The model part of the ``train.yaml`` WeNet's converter
    (``convert_whisper_to_wenet_config_and_ckpt.py``) writes for ``dims``, in WeNet's keys:
    ``input_dim``/``output_dim``, ``encoder: transformer`` with its ``encoder_conf``,
    ``decoder: transformer`` with its ``decoder_conf``, ``model: whisper``, ``tokenizer:
    whisper`` with ``tokenizer_conf.is_multilingual`` (``n_vocab >= 51865``) and
    ``num_languages`` (``n_vocab − 51765 − is_multilingual``), and
    ``dataset_conf.feats_type: log_mel_spectrogram`` with ``log_mel_spectrogram_conf``,
    ``ctc_conf.ctc_blank_id`` (``<|nospeech|>``) and ``model_conf`` (``ctc_weight`` 0.3,
    ``lsm_weight`` 0.1, ``length_normalized_loss`` false, ``special_tokens`` as WeNet writes
    them: ``eot`` is ``sot``'s id, see :func:`asrkit.models.whisper.special_tokens`).
    Where WeNet's converter writes a value asrkit refuses, this writes asrkit's (WeNet's
    same behaviour at inference): ``gradient_checkpointing: false`` (WeNet: true; a training-time
    memory saving, set it in the fine-tuning config) and ``static_chunk_size: 0`` (WeNet: -1; both mean no chunk).
    Training keys (optimiser, batches, augmentation) are the recipe's, not written."""
    multilingual = dims["n_vocab"] >= 51865
    num_languages = dims["n_vocab"] - 51765 - int(multilingual)
    names = special_token_names(num_languages)
    eot = dims["n_vocab"] - len(names)

    def token(name: str) -> int:
        return eot + names.index(name)

    encoder_conf = {"input_layer": "conv1d2", "output_size": dims["n_audio_state"],
                    "attention_heads": dims["n_audio_head"], "linear_units": 4 * dims["n_audio_state"],
                    "num_blocks": dims["n_audio_layer"], "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                    "attention_dropout_rate": 0.0, "normalize_before": True, "use_dynamic_chunk": False,
                    "use_dynamic_left_chunk": False, "pos_enc_layer_type": "abs_pos_whisper",
                    "static_chunk_size": 0, "key_bias": False, "activation_type": "gelu",
                    "gradient_checkpointing": False}
    decoder_conf = {"tie_word_embedding": True, "attention_heads": dims["n_text_head"],
                    "linear_units": 4 * dims["n_text_state"], "num_blocks": dims["n_text_layer"],
                    "dropout_rate": 0.1, "positional_dropout_rate": 0.1, "self_attention_dropout_rate": 0.0,
                    "src_attention_dropout_rate": 0.0, "input_layer": "embed_learnable_pe",
                    "use_output_layer": True, "normalize_before": True, "src_attention": True,
                    "key_bias": False, "activation_type": "gelu", "gradient_checkpointing": False}
    return {"input_dim": dims["n_mels"], "output_dim": dims["n_vocab"],
            "encoder": "transformer", "encoder_conf": encoder_conf,
            "decoder": "transformer", "decoder_conf": decoder_conf,
            "model": "whisper",
            "tokenizer": "whisper",
            "tokenizer_conf": {"is_multilingual": multilingual, "num_languages": num_languages},
            "ctc_conf": {"ctc_blank_id": token("<|nospeech|>")},
            "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False,
                           # (WeNet's converter writes eot as sot's id)
                           "special_tokens": {key: token(WHISPER_TOKENS["sot" if key == "eot" else key])
                                              for key in WHISPER_TOKENS}},
            "dataset_conf": {"feats_type": "log_mel_spectrogram",
                             "log_mel_spectrogram_conf": {"n_fft": 400, "hop_length": 160,
                                                          "num_mel_bins": dims["n_mels"], "padding": 0}}}


def build_from_config(config: dict, source: str = "config") -> WhisperModel:
    """The :class:`WhisperModel` of a :func:`wenet_config` dict (its ``encoder_conf`` and
    ``decoder_conf`` validated by asrkit's schema: :class:`asrkit.schema.ConfigError` for a
    key asrkit does not implement)."""
    encoder_conf = build(EncoderConf, config["encoder_conf"], f"{source}: encoder_conf")
    decoder_conf = build(DecoderConf, config["decoder_conf"], f"{source}: decoder_conf")
    return build_whisper(config["input_dim"], config["output_dim"], encoder_conf, decoder_conf)


def from_openai_state(state: dict, source: str) -> dict:
    """``state`` (OpenAI's names) under :class:`WhisperModel`'s names, float32, with the
    output layer's zero bias (see the module docstring); :class:`CheckpointError` naming a
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
    embedding = out.get("decoder.embed.weight")
    if embedding is not None:
        out["decoder.output_layer.weight"] = embedding
        out["decoder.output_layer.bias"] = embedding.new_zeros(embedding.size(0))
    return out


def load_openai_whisper(path: str | Path) -> tuple[dict, WhisperModel]:
    """``(config, model)`` of the OpenAI Whisper file ``path``: :func:`wenet_config` of its
    dimensions, and the float32 :class:`WhisperModel` holding its weights, in eval mode.
    :class:`CheckpointError` (one line) for a file that is not that layout, or whose keys or
    shapes are not those of its dimensions (naming the first key that differs)."""
    dims, state = read_openai_file(path)
    config = wenet_config(dims)
    model = build_from_config(config, str(path))
    weights = from_openai_state(state, str(path))
    own = model.state_dict()
    for name in sorted(set(own) | set(weights)):
        if name not in weights:
            raise CheckpointError(f"{path}: no tensor for '{name}' (a model of dims {dims} has it)")
        if name not in own:
            raise CheckpointError(f"{path}: '{name}' is not a tensor of a model of dims {dims}")
        if own[name].shape != weights[name].shape:
            raise CheckpointError(f"{path}: '{name}' has shape {tuple(weights[name].shape)}, "
                                  f"the model of its dims {tuple(own[name].shape)}")
    model.load_state_dict(weights)
    return config, model.eval()


def convert_openai_file(path: str | Path, out_dir: str | Path, seed: int = 0) -> tuple[Path, Path]:
    """WeNet's converter in asrkit: ``(train.yaml, whisper.pt)`` written into ``out_dir`` for
    the OpenAI file ``path``: the :func:`wenet_config` of its dimensions, and an asrkit
    checkpoint (``{"model": state}``, :func:`asrkit.checkpoint.save.save_checkpoint`, with
    its ``whisper.yaml`` record) holding every weight of the ``model: whisper`` that config
    builds (:func:`asrkit.models.registry.build_model`), so that
    :func:`asrkit.checkpoint.weights.load_weights` takes it as it is: the file's tensors
    under asrkit's names (:func:`load_openai_whisper`) and the CTC head, which Whisper has
    not (WeNet's training starts it from its initialisation), at ``torch.nn.Linear``'s
    initialisation drawn from a generator seeded with ``seed`` (the global one untouched)."""
    config, model = load_openai_whisper(path)
    state = dict(model.state_dict())
    if config["model_conf"]["ctc_weight"] > 0.0:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ctc = CTC(config["output_dim"], config["encoder_conf"]["output_size"],
                      config["ctc_conf"]["ctc_blank_id"])
        state.update({f"ctc.{k}": v for k, v in ctc.state_dict().items()})
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path, checkpoint_path = out_dir / "train.yaml", out_dir / "whisper.pt"
    atomic_write_text(config_path, yaml.safe_dump(config, sort_keys=False))
    save_checkpoint(checkpoint_path, {"model": state}, {"converted_from": str(path)})
    return config_path, checkpoint_path
