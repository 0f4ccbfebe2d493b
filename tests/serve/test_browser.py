"""The page in a real browser: Debian's Chromium driven by Selenium (the driver at an explicit
path, headless), its microphone a WAV file (``--use-fake-device-for-media-stream
--use-file-for-fake-audio-capture``).  The page captures it through getUserMedia and its
AudioWorklet, streams it over the websocket, and shows as its final text what asrkit's own
streaming recognizer gives for that WAV with the same model and settings (chunk 16).

Chromium and chromedriver come from ``tools/setup_browser.sh``, which ``.ci/run`` runs before
the suite; where they are missing the test skips, saying so."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import soundfile as sf

from tests.serve.conftest import ServerThread, with_silence
from tests.serve.test_wenet_protocol import alone

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


def test_the_page_streams_the_microphone_and_shows_the_recognizers_text(chunk_model, utterances, tmp_path):
    from asrkit.serve import ServedModel
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    pcm = with_silence(np.concatenate([utterances[6][1], np.zeros(8000, np.int16), utterances[7][1]]),
                       before_s=1.0, after_s=2.0)
    wav = tmp_path / "mic.wav"
    sf.write(wav, pcm, 16000, subtype="PCM_16")
    expected = [t for t in alone(chunk_model, pcm) if t]
    assert len(expected) == 1 and expected[0]
    server = ServerThread(ServedModel(chunk_model))
    driver = _driver(wav)
    try:
        driver.get(server.http + "/")
        WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "status").text == "ready")
        assert "u2pp" in driver.find_element(By.ID, "model").text
        assert "chunk by chunk" in driver.find_element(By.ID, "kind").text
        driver.find_element(By.ID, "start").click()
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#finals li")
                                        or d.find_element(By.ID, "status").text.startswith(("error", "failed")))
        finals = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#finals li")]
        assert finals[:1] == expected, (driver.find_element(By.ID, "status").text,
                                       driver.find_element(By.ID, "rate").text)
    finally:
        driver.quit()
        server.close()
