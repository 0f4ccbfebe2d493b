"""A real voice through the real page: Chromium's microphone is a recording of a person (a
connected sequence of lucas's FSDD takes, 8 kHz, as the dataset has them), the served model
the full-context real-speech fixture (``tests/fixtures/asrkit_digits/mixed_real``, which never
heard lucas); the page's final text is the digits he said.  Chromium, its driver and the
skip where they are missing: ``tests/serve/test_browser.py``."""
from __future__ import annotations

import os

import numpy as np
import pytest
import soundfile as sf
import torch

from asrkit.data.audio import resample
from tests.helpers import REPO, connected_takes, fsdd_takes
from tests.serve.serve_helpers import ServerThread
from tests.serve.test_browser import CHROMIUM, DRIVER, _driver

REAL_MODEL = REPO / "tests" / "fixtures" / "asrkit_digits" / "mixed_real"

pytestmark = [pytest.mark.usefixtures("threads_back"),
              pytest.mark.skipif(CHROMIUM is None or not os.path.isfile(DRIVER),
                                 reason="needs Chromium and /usr/bin/chromedriver (tools/setup_browser.sh)")]


def _robust(model, samples: np.ndarray, text: str) -> bool:
    """Whether the text survives what a browser's audio path may do to the recording: resampling
    to 48 kHz and back, a gain, faint noise, a capture starting a little later."""
    x = torch.from_numpy(samples)[None]
    trip = resample(resample(x, 8000, 48000), 48000, 8000)[0].numpy()
    noise = np.random.default_rng(0).normal(0, 1e-3, trip.shape).astype(np.float32)
    variants = [trip * g + noise for g in (0.5, 1.0)] + [samples[s:] for s in (8, 80)]
    return all(model.transcribe(v, sample_rate=8000).text == text for v in variants)


def test_a_real_recording_as_the_microphone_gives_the_digits_said(tmp_path):
    from asrkit.serve import ServedModel
    from asrkit.transcribe import load_model
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    model = load_model(REAL_MODEL)
    takes = fsdd_takes("lucas", range(2, 4))
    chosen = None
    for start in range(0, len(takes) - 4, 3):  # the first sequence of 5 takes the model gets right, robustly
        part = takes[start:start + 5]
        samples = connected_takes([s for _, s, _ in part], gap_s=0.25)
        samples = np.concatenate([np.zeros(6400, np.float32), samples, np.zeros(12000, np.float32)])
        truth = " ".join(w for _, _, w in part)
        if model.transcribe(samples, sample_rate=8000).text == truth and _robust(model, samples, truth):
            chosen = samples, truth
            break
    assert chosen, "no sequence of lucas's takes that the fixture model recognizes robustly"
    samples, truth = chosen
    wav = tmp_path / "lucas.wav"
    sf.write(wav, resample(torch.from_numpy(samples)[None], 8000, 16000)[0].numpy(), 16000, subtype="PCM_16")
    server = ServerThread(ServedModel(model))
    driver = _driver(wav)
    try:
        driver.get(server.http + "/")
        WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "status").text == "ready")
        assert "full context" in driver.find_element(By.ID, "kind").text
        driver.find_element(By.ID, "start").click()
        WebDriverWait(driver, 40).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#finals li")
                                        or d.find_element(By.ID, "status").text.startswith(("error", "failed")))
        finals = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#finals li")]
        assert finals[:1] == [truth], (finals, driver.find_element(By.ID, "status").text)
    finally:
        driver.quit()
        server.close()
