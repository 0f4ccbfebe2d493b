"""WeNet's two tiny transducer models (``tests/fixtures/wenet/transducer/{rnnt_offline,
rnnt_stateless_u2pp}``, copied from ``/work/shared/wenet_reference/transducer``; its README,
copied beside them, says how they and ``reference*.pt`` were made), loaded as asrkit models,
and the batch WeNet computed its batch losses on."""
from __future__ import annotations

from pathlib import Path

import torch

from tests.models.wenet_reference import load_wenet_folder

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "wenet" / "transducer"
REFERENCES = {"rnnt_offline": "reference.pt", "rnnt_stateless_u2pp": "reference_chunk4.pt"}


def load_wenet_transducer(name: str, config: str = "train.yaml", overrides: tuple[str, ...] = ()):
    """The WeNet model of fixture folder ``name`` from ``config`` (as WeNet wrote it, with
    ``overrides``; relative paths resolve from that folder, as in a WeNet experiment) and
    ``epoch_5.pt``, in eval mode."""
    return load_wenet_folder(FIXTURES / name, config, overrides)


def load_reference(name: str) -> dict:
    return torch.load(FIXTURES / name / REFERENCES[name], weights_only=True)


def reference_batch(reference: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(feats, feats_lengths, target, target_lengths)`` of WeNet's ``batch``: its
    utterances' ``feats`` padded with zeros in its order (what WeNet's script asserted)."""
    batch = reference["batch"]
    by_key = {utt["key"]: utt["feats"] for utt in reference["utts"]}
    lengths = batch["feats_lengths"]
    feats = torch.zeros(len(batch["keys"]), int(lengths.max()), by_key[batch["keys"][0]].size(1))
    for i, key in enumerate(batch["keys"]):
        feats[i, :by_key[key].size(0)] = by_key[key]
        assert by_key[key].size(0) == lengths[i]
    return feats, lengths, batch["target"], batch["target_lengths"]
