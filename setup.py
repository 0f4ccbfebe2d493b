"""asrkit: config-driven conformer CTC/attention speech recognition training."""
from setuptools import find_packages, setup

setup(
    name="asrkit",
    version="0.1.0",
    description="Config-driven conformer CTC/attention ASR training toolkit (WeNet style)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["asrkit", "asrkit.*"]),
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.4",
        "torchaudio>=2.4",
        "soundfile>=0.12",
        "sentencepiece>=0.2",
        "tensorboard>=2.14",
        "pyyaml>=6.0",
        "numpy>=1.24",
        "silero-vad>=6.2",      # the voice-activity detector of transcribe (docs/transcribe.md)
        "onnxruntime>=1.18",    # runs silero-vad's model
        "tqdm>=4.66",           # progress bars on a terminal
        "websockets>=13",       # asrkit serve: websocket + HTTP on one port (docs/serve.md)
    ],
    extras_require={"test": ["pytest>=7.4", "pytest-xdist>=3.5", "sherpa-onnx>=1.12"],
                    "export": ["onnx>=1.16", "onnxruntime>=1.18"],
                    # noise and room impulse responses for the synthesized recipes (docs/data.md)
                    "augment": ["pyroomacoustics>=0.7", "scipy>=1.10"],
                    "browser-test": ["selenium>=4.20"]},
    entry_points={
        "console_scripts": [
            "asrkit-train = asrkit.bin.train:main",
            "asrkit-average-model = asrkit.bin.average_model:main",
            "asrkit-recognize = asrkit.bin.recognize:main",
            "asrkit-export = asrkit.bin.export:main",
            "asrkit-export-onnx = asrkit.bin.export_onnx:main",
            "asrkit = asrkit.bin.cli:main",
            "asrkit-doctor = asrkit.bin.doctor:main",
        ],
    },
)
