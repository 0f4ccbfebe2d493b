"""Item 7 -- security: a checkpoint carrying a pickle payload is refused (never executed);
tar shard members with absolute paths, ``..`` or links are rejected; no shell command is
built from data-list content; tools work with paths containing spaces (the recipe test,
tests/examples/test_digits_recipe.py, runs every stage in such a path)."""
from __future__ import annotations

import ast
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
import torch

from asrkit.data.lists import ListEntry, read_list
from asrkit.data.processors import Skip, build_sample_processor
from asrkit import checkpoint as ckpt
from tests.data.audio_helpers import config, tokenizer_for, tone, write_wav
from tests.helpers import REPO, run_tool, train_here
from tools import make_shard_list

MARKER = Path("/tmp/asrkit_reliability_pwned")  # what the payloads below would create


@pytest.fixture(autouse=True)
def no_marker():
    MARKER.unlink(missing_ok=True)
    yield
    assert not MARKER.exists(), "a payload was executed"


class Payload:
    def __reduce__(self):
        return (Path.touch, (MARKER,))


class SystemPayload:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickle_payload_checkpoint_is_refused_and_auto_resume_skips_it(tmp_path, caplog):
    good = ckpt.save_checkpoint(tmp_path / "step_2.pt", {"model": {"w": torch.ones(2)}}, {"step": 2})
    evil = tmp_path / "step_4.pt"
    torch.save({"model": {"w": torch.ones(2)}, "extra": Payload()}, evil)
    with pytest.raises(ckpt.CheckpointError, match="refused: it carries pickled objects"):
        ckpt.load_checkpoint(evil)
    with caplog.at_level("WARNING", logger="asrkit.train"):
        assert ckpt.find_resume_checkpoint(tmp_path) == good
    assert "step_4.pt refused" in caplog.text


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_train_refuses_to_resume_from_a_pickle_payload(tiny_experiment, tmp_path):
    evil = tmp_path / "evil.pt"
    torch.save({"model": {}, "optimizer": {}, "scheduler": {}, "train_state": {}, "rng": Payload()}, evil)
    cfg = tiny_experiment.config(tmp_path / "c.yaml")
    proc = train_here(tiny_experiment, tmp_path / "exp", cfg, "--checkpoint", evil, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"cannot resume: checkpoint {evil} refused: it carries pickled objects" in proc.stderr
    assert "Traceback" not in proc.stderr and not list((tmp_path / "exp").glob("*.pt"))


# ----------------------------------------------------------------------------- tar shards


def _add(tar, name, payload=b"", kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(payload)
    tar.addfile(info, io.BytesIO(payload) if payload else None)


def test_hostile_tar_members_are_rejected_as_counted_skips(tiny_units, tmp_path):
    wav = write_wav(tmp_path / "a.wav", tone(0.5)).read_bytes()
    tar_path = tmp_path / "hostile.tar"
    with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, "good.wav", wav)
        _add(tar, "../up.wav", wav)
        _add(tar, "/abs.wav", wav)
        _add(tar, "sub/../../deep.wav", wav)
        _add(tar, "sym.wav", kind=tarfile.SYMTYPE, link="/etc/passwd")
        _add(tar, "hard.wav", kind=tarfile.LNKTYPE, link="good.wav")
    with tarfile.open(tar_path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "/abs.wav" in members and members["sym.wav"].issym()  # the tar really holds them as named

    def entry(key, member):
        m = members[member]
        return ListEntry(key=key, txt="one", duration=0.5, tar=str(tar_path), offset=m.offset_data, size=m.size)

    proc = build_sample_processor(config(tiny_units).dataset_conf, tokenizer_for(tiny_units), train=False, seed=0)
    assert not isinstance(proc(entry("good", "good.wav"), 0), Skip)
    cases = {"../up": "'..' component", "/abs": "absolute path", "sub/../../deep": "'..' component",
             "sym": "is a symbolic link", "hard": "is a hard link"}
    for key, why in cases.items():
        result = proc(entry(key, f"{key}.wav"), 0)
        assert isinstance(result, Skip) and result.reason == "unsafe_tar_member", (key, result)
        assert why in result.detail, (key, result.detail)
    # a key that is safe but points at a hostile member (list edited by hand) is refused too
    assert proc(entry("up", "../up.wav"), 0).reason == "unsafe_tar_member"


@pytest.mark.parametrize("key, why", [(k, f"key {k!r} cannot name a tar member") for k in
                                      ["../evil", "/abs/evil", "a/../../evil", "back\\slash"]]
                         + [("new\nline", "line 2: key 'new\\nline' holds whitespace")])  # (not a Kaldi token)
def test_make_shard_list_refuses_keys_that_are_unsafe_member_names(tiny_corpus, tmp_path, capsys, key, why):
    rows = [json.loads(r) for r in tiny_corpus.splits["dev"].data_list.read_text().splitlines()[:2]]
    rows[1]["key"] = key
    raw = tmp_path / "raw.list"
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SystemExit) as exit_info:
        make_shard_list.main([str(raw), str(tmp_path / "shards"), str(tmp_path / "shards.list")])
    assert exit_info.value.code == 2 and why in capsys.readouterr().err
    assert not (tmp_path / "shards.list").exists() and not list(tmp_path.rglob("*.tar"))


# ----------------------------------------------------------------------------- no shell


def test_wav_scp_pipes_are_refused_and_never_run(tmp_path):
    wav = write_wav(tmp_path / "a.wav", tone(0.5))
    (tmp_path / "wav.scp").write_text(f"u1 {wav}\nu2 touch {MARKER} |\n")
    (tmp_path / "text").write_text("u1 one\nu2 two\n")
    proc = run_tool("make_raw_list.py", tmp_path / "wav.scp", tmp_path / "text", tmp_path / "data.list", check=False)
    assert proc.returncode != 0 and "wav.scp:2" in proc.stderr and "shell pipe" in proc.stderr, proc.stderr


def test_data_list_command_is_a_missing_file_not_a_command(tiny_units, tmp_path):
    rows = [{"key": "cmd", "wav": f"touch {MARKER} |", "txt": "one", "duration": 1.0}]
    (tmp_path / "data.list").write_text(json.dumps(rows[0]) + "\n")
    proc = build_sample_processor(config(tiny_units).dataset_conf, tokenizer_for(tiny_units), train=False, seed=0)
    result = proc(read_list(tmp_path / "data.list")[0], 0)
    assert isinstance(result, Skip) and result.reason == "missing_file"


def _shell_uses(path: Path) -> list[str]:
    """Calls that run a shell or extract archives by member name, in one source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        if func in ("os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput", "pty.spawn") \
                or func.endswith((".extractall", ".extract")):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {func}")
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {func}(shell=...)")
    return found


def test_no_shell_command_or_archive_extraction_in_library_and_tools():
    files = sorted((REPO / "asrkit").rglob("*.py")) + sorted((REPO / "tools").glob("*.py"))
    assert len(files) > 20
    found = [hit for f in files for hit in _shell_uses(f)]
    assert not found, found
    probe = REPO / "tests" / "reliability" / "_probe.py"  # the scan itself can fail
    try:
        probe.write_text("import os, subprocess\nos.system('x')\nsubprocess.run('x', shell=True)\n")
        assert len(_shell_uses(probe)) == 2
    finally:
        probe.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- spaces


def test_data_tools_work_with_paths_containing_spaces(tiny_corpus, tiny_units, tmp_path):
    root = tmp_path / "my data dir"
    src = tiny_corpus.splits["dev"]
    scp, text = [], []
    for line in src.wav_scp.read_text().splitlines()[:3]:
        key, path = line.split(maxsplit=1)
        dst = root / "wav files" / f"{key} copy.wav"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dst)
        scp.append(f"{key} {dst}")
    keys = {s.split()[0] for s in scp}
    text = [t for t in src.text.read_text().splitlines() if t.split()[0] in keys]
    (root / "wav.scp").write_text("\n".join(scp) + "\n")
    (root / "text").write_text("\n".join(text) + "\n")
    run_tool("make_raw_list.py", root / "wav.scp", root / "text", root / "data.list")
    run_tool("make_shard_list.py", "--num_utts_per_shard", 2, root / "data.list", root / "shard dir",
             root / "data shards.list")
    proc = build_sample_processor(config(tiny_units).dataset_conf, tokenizer_for(tiny_units), train=False, seed=0)
    for listed in ("data.list", "data shards.list"):
        entries = read_list(root / listed)
        assert sorted(e.key for e in entries) == sorted(keys)
        assert all(not isinstance(proc(e, 0), Skip) for e in entries), listed


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("payload", [Payload, SystemPayload])
def test_a_pickle_refusal_names_pickles_whatever_the_global(payload, tmp_path):
    """A blocked module's global (os.system) is refused as a pickle, as a custom class is,
    not reported as a truncated or corrupted file."""
    evil = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.ones(2)}, "extra": payload()}, evil)
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.load_checkpoint(evil)
    assert "refused: it carries pickled objects" in str(caught.value)
    assert "corrupted" not in str(caught.value)
