"""Agreement preflight: before training, every rank proves it runs the same job.

A multi-node job where one node has an older units file, another data list or a
different ``--override`` trains garbage or hangs much later (DDP fails on a shape
mismatch, or ranks take different decisions).  So before any heavy work each rank hashes
what must be identical and the ranks all-gather the hashes:

* the resolved config **without its ``launch`` section** (node rank, addresses, backend
  and timeout legitimately differ per node); config keys that name files (units, BPE
  model, CMVN) are compared by the files' *contents*, not by their path strings, so nodes
  may keep the files at different paths;
* the bytes of the units file, the BPE model, the CMVN file(s) and the train/CV data lists;
* for a WeNet shard list (plain tar paths), the digest of its scanned index
  (``asrkit.data.wenet_shards``): the lists' bytes may agree while the tars behind them
  differ between nodes -- the index says which utterances, transcripts and offsets each
  rank would train on;
* a few run facts passed by the caller (``--max_steps``, the torch version, the asrkit
  source code).

When they differ every rank raises :class:`AgreementError` with one message naming each
differing rank, its host and every differing item; for the config, the differing keys and
both values (a second all-gather, made only on a mismatch, fetches the flattened configs).
:func:`agree_on` checks one small value (e.g. the checkpoint every rank resumes from).
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Iterable, Optional

import torch.distributed as dist

from asrkit.data.wenet_shards import index_fingerprint
from asrkit.files import file_digest
from asrkit.train.dist import DistContext

log = logging.getLogger("asrkit.train")

# Config keys naming files that are compared by content (label for the message).
CONFIG_FILE_KEYS = {
    "tokenizer_conf.symbol_table_path": "units file",
    "tokenizer_conf.bpe_path": "BPE model",
    "tokenizer_conf.non_lang_syms_path": "non-linguistic symbols file",
    "cmvn_conf.cmvn_file": "CMVN file",
    "dataset_conf.cmvn_file": "CMVN file (dataset_conf)",
}
LAUNCH_SECTION = "launch"
MAX_SHOWN = 12  # differing items listed per rank (the rest counted)
MAX_RANKS = 16  # differing ranks listed (the rest counted)


class AgreementError(RuntimeError):
    """Ranks of one job disagree on something that must be identical."""


# ----------------------------------------------------------------------------- hashing


def canonical(value: Any) -> str:
    """Canonical JSON of a config value (sorted keys, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}`` (leaves as canonical JSON)."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = canonical(value)
    return out


def comparable_config(config: dict) -> dict[str, str]:
    """The flattened config that must agree: without ``launch`` and without the path
    strings of :data:`CONFIG_FILE_KEYS` (their files are compared by content)."""
    flat = flatten({k: v for k, v in config.items() if k != LAUNCH_SECTION})
    for key in CONFIG_FILE_KEYS:
        flat.pop(key, None)
    return flat


def file_fingerprint(path: Optional[str | Path]) -> Optional[dict]:
    """``{"path", "sha256", "bytes"}`` of a file: None for no path; for an unreadable file
    ``sha256`` and ``bytes`` are None and ``error`` holds the reason."""
    if not path:
        return None
    path = Path(path)
    try:
        size = path.stat().st_size
        sha256 = file_digest(path)
    except OSError as e:
        return {"path": str(path), "sha256": None, "bytes": None, "error": str(e)}
    return {"path": str(path), "sha256": sha256, "bytes": size}


def source_digest(files: Iterable[Path], root: Path) -> str:
    """sha256 over the relative paths and bytes of ``files`` (e.g. the asrkit package)."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def package_digest() -> str:
    """Digest of the asrkit package's Python sources: nodes running different code disagree."""
    root = Path(__file__).resolve().parents[1]
    return source_digest(root.rglob("*.py"), root)[:16]


def _labelled(label: str, paths) -> list[tuple[str, str]]:
    """``(label, path)`` of one list path or several (``label 1``, ``label 2`` ...)."""
    if paths is None:
        return []
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    return [(label, paths[0])] if len(paths) == 1 else [(f"{label} {i}", p) for i, p in enumerate(paths, 1)]


def job_files(config: dict, train_data, cv_data) -> dict[str, Optional[str]]:
    """The files every rank must have identical: label -> path (None: not used).
    ``train_data``/``cv_data``: one list path or several."""
    files: dict[str, Optional[str]] = {}
    for key, label in CONFIG_FILE_KEYS.items():
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        files[label] = node or None
    if config.get("tokenizer") != "bpe":
        files["BPE model"] = None
    if not config.get("cmvn"):
        files["CMVN file"] = None
    files.update(_labelled("train data list", train_data))
    files.update(_labelled("CV data list", cv_data))
    return files


def shard_indexes(train_data, cv_data, cache_dir: Optional[str | Path]) -> dict:
    """``{"train shard index"/"CV shard index": fingerprint}`` for the lists that are WeNet
    shard lists (``asrkit.data.wenet_shards.index_fingerprint``; their tars are scanned
    here when not cached, the cache falling back to ``cache_dir``); ``{}`` for none."""
    out = {}
    for label, path in (*_labelled("train shard index", train_data), *_labelled("CV shard index", cv_data)):
        fp = index_fingerprint(path, cache_dir)
        if fp is not None:
            out[label] = fp
    return out


def fingerprint(config: dict, files: dict[str, Optional[str | dict]], extra: Optional[dict] = None) -> dict:
    """What this rank all-gathers: a digest of the comparable config, a digest per file and
    the ``extra`` run facts (canonical JSON).  A ``files`` value that is already a
    fingerprint (a dict, e.g. from :func:`shard_indexes`) is taken as it is."""
    return {
        "config_sha256": hashlib.sha256(canonical(comparable_config(config)).encode()).hexdigest(),
        "files": {label: path if isinstance(path, dict) else file_fingerprint(path)
                  for label, path in files.items()},
        "extra": {k: canonical(v) for k, v in (extra or {}).items()},
    }


# ----------------------------------------------------------------------------- comparing


def _show(value: Optional[str], limit: int = 80) -> str:
    if value is None:
        return "absent"
    return value if len(value) <= limit else value[:limit - 3] + "..."


def _file_text(d: Optional[dict]) -> str:
    if d is None:
        return "not used"
    if d.get("sha256") is None:
        return f"{d['path']} (unreadable: {d.get('error')})"
    return f"{d['path']} (sha256 {d['sha256'][:12]}, {d['bytes']} bytes)"


def _same_file(a: Optional[dict], b: Optional[dict]) -> bool:
    """Same content; or, for a shard index, the same failure on both (the loaders then
    report it on every rank, as for any malformed list)."""
    if a is None or b is None:
        return a is b
    if a.get("kind") == "shard index" and a.get("sha256") is None:
        return a == b
    return a.get("sha256") is not None and a.get("sha256") == b.get("sha256")


def differences(mine: dict, ref: dict, my_flat: Optional[dict] = None, ref_flat: Optional[dict] = None,
                rank: int = 1, ref_rank: int = 0) -> list[str]:
    """Items in which fingerprint ``mine`` (rank ``rank``) differs from ``ref``; config keys
    are named when both flattened configs are given."""
    items: list[str] = []
    if mine["config_sha256"] != ref["config_sha256"]:
        if my_flat is not None and ref_flat is not None:
            for key in sorted(set(my_flat) | set(ref_flat)):
                a, b = my_flat.get(key), ref_flat.get(key)
                if a != b:
                    items.append(f"config key {key} (rank {rank}: {_show(a)}, rank {ref_rank}: {_show(b)})")
        else:
            items.append("config")
    for label in list(dict.fromkeys([*ref["files"], *mine["files"]])):
        a, b = mine["files"].get(label), ref["files"].get(label)
        if not _same_file(a, b):
            items.append(f"{label} (rank {rank}: {_file_text(a)}; rank {ref_rank}: {_file_text(b)})")
    for key in list(dict.fromkeys([*ref["extra"], *mine["extra"]])):
        a, b = mine["extra"].get(key), ref["extra"].get(key)
        if a != b:
            items.append(f"{key} (rank {rank}: {_show(a)}, rank {ref_rank}: {_show(b)})")
    return items


def disagreement_message(gathered: list[dict], flats: Optional[list[dict]] = None) -> Optional[str]:
    """The refusal message for all-gathered fingerprints (each with ``rank`` and ``host``),
    comparing every rank with rank 0; None when they all agree."""
    ref = gathered[0]
    lines = []
    for g in gathered[1:]:
        items = differences(g, ref, flats[g["rank"]] if flats else None, flats[0] if flats else None,
                            rank=g["rank"], ref_rank=ref["rank"])
        if not items:
            continue
        shown = items[:MAX_SHOWN] + ([f"... and {len(items) - MAX_SHOWN} more"] if len(items) > MAX_SHOWN else [])
        lines.append(f"rank {g['rank']} (host {g['host']}) differs from rank {ref['rank']} (host {ref['host']}) "
                     f"in: " + "; ".join(shown))
    if not lines:
        return None
    more = len(lines) - MAX_RANKS
    lines = lines[:MAX_RANKS] + ([f"... and {more} more rank(s)"] if more > 0 else [])
    return ("ranks disagree on what must be identical in one job; refusing to start:\n  " + "\n  ".join(lines)
            + "\n  (only the config's launch section may differ between ranks; the rest of the config, the "
              "units/BPE/CMVN files, the data lists, --max_steps and the code must be the same on every node)")


# ----------------------------------------------------------------------------- collectives


def check_agreement(ctx: DistContext, config: dict, files: dict[str, Optional[str | dict]],
                    extra: Optional[dict] = None) -> None:
    """All-gather this rank's :func:`fingerprint`; raise :class:`AgreementError` on every
    rank when any rank differs from rank 0 (a no-op for world size 1)."""
    if not ctx.distributed:
        return
    mine = dict(fingerprint(config, files, extra), rank=ctx.rank, host=ctx.host)
    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine)
    ref = gathered[0]
    if all(differences(g, ref) == [] for g in gathered[1:]):
        used = [label for label, d in ref["files"].items() if d is not None]
        log.info("agreement: the %d ranks have the same config (less launch), %s and %s", ctx.world_size,
                 ", ".join(used), ", ".join(ref["extra"]) or "run facts")
        return
    flats = None
    if any(g["config_sha256"] != ref["config_sha256"] for g in gathered):  # identical decision everywhere
        flats = [None] * ctx.world_size
        dist.all_gather_object(flats, comparable_config(config))
    raise AgreementError(disagreement_message(gathered, flats))


def agree_on(ctx: DistContext, what: str, value: Any, hint: str = "") -> None:
    """Raise :class:`AgreementError` on every rank unless ``value`` (small, JSON-able) is the
    same on every rank; the message lists each rank's value under ``what``."""
    if not ctx.distributed:
        return
    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, (ctx.rank, ctx.host, canonical(value)))
    if all(v == gathered[0][2] for _, _, v in gathered):
        return
    ref = gathered[0][2]
    lines = [f"rank {r} (host {h}): {_show(v)}" for r, h, v in gathered if r == 0 or v != ref]
    raise AgreementError(f"ranks disagree on {what}; refusing to start:\n  " + "\n  ".join(lines[:MAX_RANKS + 1])
                         + (f"\n  {hint}" if hint else ""))
