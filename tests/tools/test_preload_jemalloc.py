"""``tools/preload_jemalloc.sh``, as every recipe's path.sh sources it."""
from __future__ import annotations

import subprocess

from tests.helpers import REPO

SCRIPT = REPO / "tools" / "preload_jemalloc.sh"
DEFAULT_CONF = "oversize_threshold:0,dirty_decay_ms:30000,muzzy_decay_ms:30000,background_thread:true"


def sourced(tmp_path, preload: str = "", **env) -> tuple[str, str, str]:
    """LD_PRELOAD and MALLOC_CONF after sourcing the script with ``env`` (and LD_PRELOAD
    ``preload``, set in the shell: the shell itself must not preload a made-up library), and
    the script's stderr."""
    run = subprocess.run(["bash", "-c", f'LD_PRELOAD="{preload}"; . "{SCRIPT}"; echo "$LD_PRELOAD"; '
                                        f'echo "$MALLOC_CONF"'],
                         capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", **env})
    preload, conf = run.stdout.splitlines()
    return preload, conf, run.stderr


def test_preloads_the_named_library_with_the_default_conf_and_keeps_what_is_given(tmp_path):
    lib = tmp_path / "libjemalloc.so.2"
    lib.write_bytes(b"")  # (only named: the script starts no program with it)
    assert sourced(tmp_path, ASRKIT_JEMALLOC=str(lib)) == (str(lib), DEFAULT_CONF, "")
    assert sourced(tmp_path, "/x/libother.so", ASRKIT_JEMALLOC=str(lib), MALLOC_CONF="narenas:2") == (
        f"{lib}:/x/libother.so", "narenas:2", "")
    # already preloaded, or glibc asked for: unchanged
    assert sourced(tmp_path, "/y/libjemalloc.so.2", ASRKIT_JEMALLOC=str(lib))[:2] == ("/y/libjemalloc.so.2", "")
    assert sourced(tmp_path, ASRKIT_JEMALLOC=str(lib), ASRKIT_ALLOCATOR="glibc")[:2] == ("", "")


def test_a_missing_named_library_is_one_line_and_changes_nothing(tmp_path):
    preload, conf, err = sourced(tmp_path, ASRKIT_JEMALLOC=str(tmp_path / "nope.so"))
    assert (preload, conf) == ("", "")
    assert err == f"[path.sh] ASRKIT_JEMALLOC={tmp_path / 'nope.so'}: no such file; glibc's malloc is used\n"


def test_every_recipe_sources_it():
    for path_sh in sorted((REPO / "examples").glob("*/s0/path.sh")):
        assert '. "$ASRKIT_ROOT/tools/preload_jemalloc.sh"' in path_sh.read_text(), path_sh
