"""The page in a real browser: Debian's Chromium driven by Selenium (the driver at an explicit
path, headless), its microphone a WAV file (``--use-fake-device-for-media-stream
--use-file-for-fake-audio-capture``).  The page captures it through getUserMedia and its
AudioWorklet, streams it over the websocket, and shows as its final text what asrkit's own
streaming recognizer gives for that WAV with the same model and settings (chunk 16) -- with
the browser resampling the capture to 16 kHz, and with the page's worklet resampling it from
the device's rate (``?native_rate``: 44.1 or 48 kHz).

Chromium and chromedriver come from ``tools/setup_browser.sh``, which ``.ci/run`` runs before
the suite; where they are missing the test skips, saying so."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import soundfile as sf

from tests.serve.serve_helpers import ServerThread, alone, with_silence

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = "/usr/bin/chromedriver"

pytestmark = [pytest.mark.usefixtures("threads_back"),
              pytest.mark.skipif(CHROMIUM is None or not os.path.isfile(DRIVER),
                                 reason="needs Chromium and /usr/bin/chromedriver (tools/setup_browser.sh installs "
                                        "them: apt-get install chromium chromium-driver)")]


def _driver(wav):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={wav}%noloop", "--autoplay-policy=no-user-gesture-required"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)


LEAD_S = 1.2  # seconds of silence before the speech: the capture may start late by much of it
# The utterance played as the microphone.  Where the browser's capture starts is not ours to set,
# and under load it started late by a good part of a chunk (10,240 samples at chunk 16): a CI run
# on a busy machine read "thre" for "three" in the utterance this test used to pick.  This one
# keeps its text under every start tried (measured on the 12 test utterances with 5-159 samples
# added and 1,600-11,000 cut: 4 of the 8 the model gets right flip a word under some cut, this
# one under none); the test checks a few of those starts and the browser's resampling again.
UTTERANCE = "enusnyc_iven4-test00002"
SHIFTS = (97, -1600, -5120, -8900)  # samples added (> 0) or cut (< 0) at the start


def _shifted(audio: np.ndarray, shift: int) -> np.ndarray:
    return np.concatenate([np.zeros(shift, np.int16), audio]) if shift > 0 else audio[-shift:]


def _robust(model, audio: np.ndarray, text: list[str]) -> bool:
    """Whether the recognizer's ``text`` for ``audio`` survives what a browser's audio path may do
    to the samples -- a capture starting earlier or later (the chunks then fall elsewhere),
    resampling to 48 kHz and back, faint noise: only such audio makes a fair test of the page (a
    word the model hesitates over flips with the least change)."""
    import torch
    from asrkit.data.audio import resample
    if any(alone(model, _shifted(audio, s)) != text for s in SHIFTS):
        return False
    x = torch.from_numpy(audio.astype(np.float32))[None]
    trip = resample(resample(x, 16000, 48000), 48000, 16000)[0].numpy()
    noise = np.random.default_rng(0).normal(0, 30, trip.shape)
    return alone(model, np.clip(trip * 0.7 + noise, -32768, 32767).astype(np.int16)) == text


def test_the_page_streams_the_microphone_and_shows_the_recognizers_text(chunk_model, utterances, tiny_corpus,
                                                                        tmp_path):
    from asrkit.serve import ServedModel
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    truth = dict(line.split(maxsplit=1) for line in tiny_corpus.splits["test"].text.read_text().splitlines())
    pcm = with_silence(dict(utterances)[UTTERANCE], before_s=LEAD_S, after_s=1.5)
    text = alone(chunk_model, pcm)
    expected = [t for t in text if t]
    assert expected == [truth[UTTERANCE]] and _robust(chunk_model, pcm, text), "the played utterance is no fair test"
    wav = tmp_path / "mic.wav"
    sf.write(wav, pcm, 16000, subtype="PCM_16")
    server = ServerThread(ServedModel(chunk_model))
    driver = _driver(wav)
    try:
        # the browser resampling to 16 kHz, then (?native_rate) the page's worklet from the device's rate
        for query, resampled in (("", False), ("?native_rate", True)):
            driver.get(server.http + "/" + query)
            WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "status").text == "ready")
            assert "u2pp" in driver.find_element(By.ID, "model").text
            assert "chunk by chunk" in driver.find_element(By.ID, "kind").text
            driver.find_element(By.ID, "start").click()
            WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#finals li")
                                            or d.find_element(By.ID, "status").text.startswith(("error", "failed")))
            finals = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#finals li")]
            rate = driver.find_element(By.ID, "rate").text
            assert finals[:1] == expected, (query, driver.find_element(By.ID, "status").text, rate)
            assert ("resampled" in rate) == resampled, rate
    finally:
        driver.quit()
        server.close()
