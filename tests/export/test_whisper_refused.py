"""A ``model: whisper`` experiment (Whisper's log-mel features) is refused by both exports in
one line, exit status 2, before its weights are read: their runtimes compute Kaldi fbank."""
from __future__ import annotations

import pytest

from asrkit.bin import export, export_onnx
from asrkit.checkpoint.whisper import convert_openai_file
from tests.models.whisper.openai_files import DIMS, random_openai_file

pytest.importorskip("whisper")


@pytest.mark.parametrize("tool, output", [(export, ["--output", "final.zip"]), (export_onnx, ["--output_dir", "onnx"])])
def test_whisper_models_are_refused_in_one_line(tool, output, tmp_path, caplog):
    source = random_openai_file(tmp_path / "tiny.pt", dims=dict(DIMS, n_audio_state=16, n_text_state=16))
    config, _ = convert_openai_file(source, tmp_path / "exp")
    missing = tmp_path / "exp" / "never-read.pt"   # (refused before the checkpoint is read)
    output = [output[0], str(tmp_path / output[1])]
    assert tool.main(["--config", str(config), "--checkpoint", str(missing), *output]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "feats_type log_mel_spectrogram cannot be exported" in errors[0]
    assert "\n" not in errors[0] and not (tmp_path / output[1].split("/")[-1]).exists()
