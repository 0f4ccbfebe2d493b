"""asrkit's Whisper conversion against WeNet's converter (``tests/fixtures/wenet/whisper/``:
WeNet's ``train.yaml`` and ``final.pt`` for a random-weight width-8 model, and the names of
the checkpoint WeNet's training saves from it; README.md there says how they were made).

The same OpenAI-layout file (regenerated from its seed, its tensors' digest checked) is
converted by asrkit (:func:`asrkit.checkpoint.whisper.convert_openai_file`), and:

* the two ``train.yaml`` are equal key by key (:data:`DELIBERATE_DIFFERENCES` lists where
  they may differ: nowhere today);
* every tensor of WeNet's file equals asrkit's under asrkit's name (``torch.equal``), and
  what WeNet's file lacks -- the output layer and the CTC head -- is exactly what asrkit's
  loading of it adds, so the two load as the same state dict;
* the models built from the two directories (asrkit's loader: config, tokenizer, model,
  weights) compute the same encoder output and logits;
* a checkpoint with the tensors WeNet's training saves loads (its learned decoder table
  and Whisper's encoder table as weights, not as sinusoids to check), and is told apart
  from asrkit's own checkpoint of the same model (the trainer's ``--checkpoint`` branch)."""
from __future__ import annotations

import hashlib
import shutil

import pytest
import torch
import yaml

from asrkit.checkpoint.load import CheckpointError, load_checkpoint
from asrkit.checkpoint.weights import is_wenet_checkpoint, load_weights, model_state
from asrkit.checkpoint.wenet import from_wenet_state
from asrkit.checkpoint.whisper import convert_openai_file
from asrkit.trained_model import load_trained_model
from tests.helpers import REPO
from tests.models.whisper.openai_files import random_openai_state

pytest.importorskip("whisper")
pytest.importorskip("tiktoken")

FIXTURE = REPO / "tests" / "fixtures" / "wenet" / "whisper"
# the input WeNet's converter was run on: random_openai_file(path, seed=0, dims=DIMS)
DIMS = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=8, n_audio_head=2, n_audio_layer=1,
            n_vocab=51865, n_text_ctx=448, n_text_state=8, n_text_head=2, n_text_layer=1)
SEED = 0
# SHA-256 over (name, tensor bytes) of that input's state, in order (README.md)
INPUT_DIGEST = "68803339188ee722f986906541f3f3842f5d0557de234aef7bab4ea2bb589239"
# train.yaml keys (dotted) where asrkit's conversion may differ from WeNet's, and why: none
# (asrkit writes WeNet's every key and value, and reads each with WeNet's meaning)
DELIBERATE_DIFFERENCES: dict[str, str] = {}
# what WeNet's converter leaves out and asrkit's conversion (and its loading of WeNet's file) adds
HEADS = {"decoder.output_layer.weight", "decoder.output_layer.bias", "ctc.ctc_lo.weight", "ctc.ctc_lo.bias"}


def state_digest(state: dict) -> str:
    digest = hashlib.sha256()
    for name, tensor in state.items():
        digest.update(name.encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """``(WeNet's dir, asrkit's dir)``, each with ``train.yaml`` and its checkpoint."""
    folder = tmp_path_factory.mktemp("wenet_whisper")
    state = random_openai_state(DIMS, SEED)
    assert state_digest(state) == INPUT_DIGEST, "the regenerated input is not the file WeNet converted"
    source = folder / "openai.pt"
    torch.save({"dims": DIMS, "model_state_dict": state}, source)
    convert_openai_file(source, folder / "asrkit")
    wenet = folder / "wenet"
    wenet.mkdir()
    for name in ("train.yaml", "final.pt"):
        shutil.copy(FIXTURE / name, wenet / name)
    return wenet, folder / "asrkit"


def differences(ours, theirs, path: str = "") -> list[str]:
    """The dotted keys where two YAML trees differ (a value, a type, or a key one lacks)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [d for key in sorted(set(ours) | set(theirs), key=str)
                for d in (differences(ours[key], theirs[key], f"{path}{key}.") if key in ours and key in theirs
                          else [f"{path}{key} (only {'asrkit' if key in ours else 'WeNet'} writes it)"])]
    same = type(ours) is type(theirs) and ours == theirs
    return [] if same else [f"{path.rstrip('.')}: asrkit {ours!r}, WeNet {theirs!r}"]


def test_configs_are_equal_key_by_key(converted):
    wenet, asrkit = converted
    found = differences(yaml.safe_load((asrkit / "train.yaml").read_text()),
                        yaml.safe_load((wenet / "train.yaml").read_text()))
    assert [d for d in found if d.split(":")[0].split(" ")[0] not in DELIBERATE_DIFFERENCES] == []


def test_every_tensor_is_equal(converted):
    wenet, asrkit = converted
    trained = load_trained_model(wenet / "train.yaml", wenet / "final.pt")
    model = trained.model
    ours = load_checkpoint(asrkit / "whisper.pt")
    theirs = load_checkpoint(wenet / "final.pt")
    assert is_wenet_checkpoint(theirs, model) and not is_wenet_checkpoint(ours, model)
    mapped = from_wenet_state(theirs["model"], "WeNet", model.state_dict().keys())
    assert set(ours["model"]) - set(mapped) == HEADS and set(mapped) <= set(ours["model"])
    unequal = [name for name, tensor in mapped.items()
               if tensor.dtype != torch.float32 or not torch.equal(tensor, ours["model"][name])]
    assert unequal == []
    loaded_ours, loaded_theirs = model_state(ours, model, "asrkit"), model_state(theirs, model, "WeNet")
    assert loaded_ours.keys() == loaded_theirs.keys() == model.state_dict().keys()
    assert all(torch.equal(loaded_ours[k], loaded_theirs[k]) for k in loaded_ours)


def test_both_compute_the_same(converted):
    wenet, asrkit = converted
    models = [load_trained_model(d / "train.yaml", d / checkpoint).model
              for d, checkpoint in ((wenet, "final.pt"), (asrkit, "whisper.pt"))]
    generator = torch.Generator().manual_seed(3)
    feats = torch.randn(2, 60, 80, generator=generator)
    lengths = torch.tensor([60, 41])
    outputs = []
    with torch.no_grad():
        for model in models:
            enc_out, enc_lengths = model.encode(feats, lengths)
            prompt = torch.tensor([model.decoder_prompt() + [400, 401], model.decoder_prompt() + [402, 0]])
            mask = torch.ones(2, 1, enc_out.size(1), dtype=torch.bool)
            logits = model.decoder.forward_logits(enc_out, mask, prompt, torch.tensor([6, 5]))
            outputs.append((enc_out, enc_lengths, logits, model.ctc(enc_out)))
    assert all(torch.equal(a, b) for a, b in zip(*outputs))
    assert models[0].decoder_prompt() == [50258, 50260, 50359, 50363]  # <|zh|>: WeNet's language_conf


def wenet_training_state() -> dict:
    """A state with the names, shapes and dtypes of the checkpoint WeNet's training saves
    (``training_checkpoint_keys.txt``): ``final.pt``'s tensors, the output layer's weight
    the embedding (WeNet's training ties them), seeded random values for the rest (the
    output bias and CTC head WeNet initialises, then trains)."""
    final = torch.load(FIXTURE / "final.pt", weights_only=True)
    generator = torch.Generator().manual_seed(5)
    state = {}
    for line in (FIXTURE / "training_checkpoint_keys.txt").read_text().splitlines():
        if line.startswith("#"):
            continue
        name, shape, dtype = line.split()
        assert dtype == "float32"
        size = [int(n) for n in shape.split("x")]
        state[name] = final[name] if name in final else torch.randn(size, generator=generator)
        assert list(state[name].shape) == size
    state["decoder.output_layer.weight"] = state["decoder.embed.0.weight"]
    return state


def test_wenets_training_checkpoint_loads(converted, tmp_path):
    wenet, asrkit = converted
    path = tmp_path / "epoch_0.pt"
    state = wenet_training_state()
    state["decoder.embed.1.pe"] = state["decoder.embed.1.pe"] + 0.5  # (trained: not the converter's table)
    torch.save(state, path)
    model = load_trained_model(wenet / "train.yaml", path).model
    got = model.state_dict()
    for wenet_name, name in (("decoder.embed.1.pe", "decoder.pos_enc.pe"), ("encoder.embed.pos_enc.pe",) * 2,
                             ("decoder.output_layer.bias",) * 2, ("ctc.ctc_lo.weight",) * 2,
                             ("decoder.embed.0.weight", "decoder.output_layer.weight")):
        assert torch.equal(got[name], state[wenet_name]), name
    # asrkit's own checkpoint of this model (its tables are weights too) is not taken for WeNet's
    own = {"model": model.state_dict()}
    assert not is_wenet_checkpoint(own, model) and is_wenet_checkpoint({"model": state}, model)
    # WeNet trained with --jit clones the embedding into the output layer: refused, not half-loaded
    state["decoder.output_layer.weight"] = state["decoder.output_layer.weight"] + 1.0
    with pytest.raises(CheckpointError, match="are one tensor of the model \\(tied\\) but differ") as e:
        load_weights(model, {"model": state}, str(path))
    assert "\n" not in str(e.value)


def test_a_converted_directory_transcribes(converted, tmp_path):
    """``asrkit transcribe`` / recognize's loader on WeNet's directory as it is (``final.pt``
    found by name)."""
    from asrkit.transcribe import load_model

    wenet, _ = converted
    transcriber = load_model(wenet)
    samples = 0.1 * torch.randn(8000, generator=torch.Generator().manual_seed(4))
    result = transcriber.transcribe(samples, sample_rate=16000, mode="ctc_greedy_search")
    assert isinstance(result.text, str)


def test_key_bias_and_src_key_bias_are_wenets_two_keys():
    """WeNet's decoder: ``key_bias`` is self-attention's key projection, ``src_key_bias``
    source attention's (default true each)."""
    from asrkit.models.decoder import TransformerDecoder
    from asrkit.models.schema import DecoderConf

    def biases(**keys):
        layer = TransformerDecoder(10, 8, DecoderConf(attention_heads=2, linear_units=16, num_blocks=1,
                                                      **keys)).decoders[0]
        return layer.self_attn.linear_k.bias is not None, layer.src_attn.linear_k.bias is not None

    assert biases() == (True, True)
    assert biases(key_bias=False) == (False, True)
    assert biases(src_key_bias=False) == (True, False)
    assert biases(key_bias=False, src_key_bias=False) == (False, False)
