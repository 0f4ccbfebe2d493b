"""No silent hang: each rank's phase, its heartbeat in the store, the data-loader watchdog,
and the diagnosis of a failed collective."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
import threading
import time
from typing import Any, Iterator, Optional

import torch.distributed as dist

from asrkit.train.dist.context import DistContext

log = logging.getLogger("asrkit.train")

# ----------------------------------------------------------------------------- no silent hang
#
# Every rank keeps a *phase* -- what it is doing right now ("waiting for train batch 3/40
# of epoch 0 from the data loader", "in the step all-reduce after ...", "training
# on batch ...") -- and a heartbeat thread publishes it to the process group's store
# every few seconds.  When a collective fails or times out (``launch.timeout_s``, passed to
# ``init_process_group``), the failing rank reads the others' phases and names them; a
# rank that waits for its data loader longer than the timeout ends itself (a watchdog
# thread), so a job started without torchrun's agent ends too.

EXIT_STALLED = 3                             # exit status of a rank ended by the watchdog
_STATUS_KEY = "asrkit/rank_status/{}"


def default_store():
    """The default process group's key-value store (None without one)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        from torch.distributed import distributed_c10d
        return distributed_c10d._get_default_store()
    except Exception:  # pragma: no cover - private API moved
        return None


def is_collective_failure(exc: BaseException) -> bool:
    """Did ``exc`` come out of a collective (timeout, a peer gone, a backend error)?"""
    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    # gloo raises plain RuntimeErrors whose text names its source file ("[.../gloo/transport/
    # tcp/unbound_buffer.cc:78] Timed out waiting ...", "... Connection closed by peer").
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(s in text for s in ("gloo", "NCCL", "ProcessGroup", "c10d"))


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return re.sub(r"^\[[^\]]*\]\s*", "", text)  # drop gloo's "[/path/file.cc:78] " prefix


@dataclasses.dataclass(frozen=True)
class Phase:
    text: str      # reads after "while": "waiting for train batch 3/40 of epoch 0 from the data loader"
    kind: str      # "data" (waiting for the loader), "collective", "compute" or "other"
    since: float   # time.monotonic() when it began


class RankMonitor:
    """This rank's phase, its heartbeat in the store, and the data-loader watchdog.

    * :meth:`set_phase` is a local assignment (no I/O): call it as often as you like.
    * A publisher thread writes ``{rank, host, pid, phase, kind, elapsed_s, beat, state}`` to
      the store every ``interval_s`` (``timeout_s / 10``, between 0.5 and 30 s).
    * A watchdog thread ends the process (status :data:`EXIT_STALLED`) when the phase is a
      wait for the data loader that has lasted longer than ``timeout_s``, after logging and
      printing which rank, host and batch it was.
    * :meth:`explain` turns a failed collective into a message naming this rank's phase and
      every other rank's last published phase.
    """

    def __init__(self, ctx: DistContext, timeout_s: float, store=None, *,
                 interval_s: Optional[float] = None):
        self.rank, self.world_size, self.host = ctx.rank, ctx.world_size, ctx.host
        self.timeout_s = float(timeout_s)
        self.store = store
        self.interval_s = interval_s or min(max(self.timeout_s / 10.0, 0.5), 30.0)
        self._phase = Phase("starting", "other", time.monotonic())
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._store_ok = store is not None

    @classmethod
    def for_context(cls, ctx: DistContext, timeout_s: float) -> "RankMonitor":
        """A monitor publishing to the default group's store (when there is one), attached
        to ``ctx`` (``ctx.monitor``) and started."""
        monitor = cls(ctx, timeout_s, default_store() if ctx.distributed else None)
        ctx.monitor = monitor
        monitor.start()
        return monitor

    # ------------------------------------------------------------------ phase

    @property
    def phase(self) -> Phase:
        return self._phase

    def set_phase(self, text: str, kind: str = "other") -> None:
        self._phase = Phase(text, kind, time.monotonic())

    # ------------------------------------------------------------------ threads

    def start(self) -> None:
        targets = [self._watch] + ([self._beat] if self.store is not None else [])
        for fn in targets:
            t = threading.Thread(target=fn, name=f"asrkit-{fn.__name__.strip('_')}-rank{self.rank}", daemon=True)
            t.start()
            self._threads.append(t)
        self._publish()

    def stop(self, state: str = "finished") -> None:
        """Stop the threads and publish a last status (``finished``, ``preempted`` or
        ``failed``).  A failing process waits at most 2 s for each (its store may be gone);
        one that ends well waits up to 30 s, so that on a loaded machine no thread is still
        inside a store call when the process group is torn down and the interpreter exits
        (a daemon thread returning from C++ then aborts the process: "terminate called
        without an active exception")."""
        wait_s = 2.0 if state == "failed" else 30.0
        self._stop.set()
        for t in self._threads:
            t.join(timeout=wait_s)
        self._threads.clear()
        self._publish_bounded(state, wait_s)

    def _publish_bounded(self, state: str, wait_s: float = 2.0) -> None:
        """Publish from a helper thread, waiting at most ``wait_s``: an unreachable store must
        not delay a failing process."""
        t = threading.Thread(target=self._publish, args=(state,), daemon=True)
        t.start()
        t.join(timeout=wait_s)

    def _record(self, state: str) -> str:
        p = self._phase
        return json.dumps({"rank": self.rank, "host": self.host, "pid": os.getpid(), "phase": p.text,
                           "kind": p.kind, "elapsed_s": round(time.monotonic() - p.since, 3),
                           "beat": time.time(), "state": state})

    def _publish(self, state: str = "running") -> None:
        if not self._store_ok:
            return
        try:
            self.store.set(_STATUS_KEY.format(self.rank), self._record(state))
        except Exception as e:  # the store's host is gone: stop trying, never block training
            self._store_ok = False
            if state == "running":  # (at the end of a job the store's host may just have finished)
                log.warning("rank %d: cannot publish its status to the store any more (%s)", self.rank,
                            _first_line(e))

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._publish()

    def _watch(self) -> None:
        while not self._stop.wait(min(0.5, self.interval_s)):
            p = self._phase
            waited = time.monotonic() - p.since
            if p.kind == "data" and waited > self.timeout_s:
                self._stalled(p, waited)
                return

    def _stalled(self, p: Phase, waited: float) -> None:
        msg = (f"rank {self.rank} (host {self.host}, pid {os.getpid()}): no batch from the data loader for "
               f"{waited:.1f} s (> launch.timeout_s {self.timeout_s:g}) while {p.text}; ending this process "
               f"so that the job fails instead of hanging")
        self._publish_bounded("stalled")  # for the peers' diagnosis
        log.error(msg)
        for h in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                h.flush()
        with contextlib.suppress(Exception):
            print(f"error: {msg}", file=sys.stderr, flush=True)
        os._exit(EXIT_STALLED)

    # ------------------------------------------------------------------ diagnosis

    def peer_status(self, wait_s: float = 5.0) -> dict[int, Optional[dict]]:
        """Every other rank's last published status (None: nothing published).  The store is
        read by a helper thread for at most ``wait_s``: a store whose host vanished without
        closing the connection (a link down) can block a read for the kernel's TCP
        retransmission timeout (~15 min), so the ranks not read by then get an ``error``."""
        out: dict[int, Optional[dict]] = {}
        if self.store is None:
            return out
        others = [r for r in range(self.world_size) if r != self.rank]

        def read() -> None:
            for r in others:
                key = _STATUS_KEY.format(r)
                try:
                    out[r] = json.loads(self.store.get(key)) if self.store.check([key]) else None
                except Exception as e:
                    out[r] = {"error": _first_line(e)}
                    return  # the store is unreachable: do not wait on it once per rank

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout=wait_s)
        result = dict(out)
        if reader.is_alive():
            silent = {"error": f"no answer from the store within {wait_s:g} s"}
            result.update({r: silent for r in others if r not in result})
        return dict(sorted(result.items()))

    def describe_peers(self, max_lines: int = 8) -> list[str]:
        """One line per other rank; with more than ``max_lines`` of them, the ranks that were
        in a collective (waiting, like this one) are only counted and the others listed."""
        now = time.time()
        rows: list[tuple[int, str, bool]] = []  # (rank, line, waiting in a collective)
        for r, st in sorted(self.peer_status().items()):
            if st is None:
                rows.append((r, f"rank {r}: no status published (it may not have reached training)", False))
            elif "error" in st:
                rows.append((r, f"rank {r}: status unreadable ({st['error']}); the store's host may be gone",
                             False))
            else:
                state = st.get("state", "running")
                prefix = "" if state == "running" else f"{state.upper()}, "
                line = (f"rank {r} (host {st.get('host')}, pid {st.get('pid')}): {prefix}{st.get('phase')}, "
                        f"for {st.get('elapsed_s', 0.0):.1f} s at its last heartbeat "
                        f"{max(now - st.get('beat', now), 0.0):.1f} s ago")
                rows.append((r, line, st.get("kind") == "collective" and state == "running"))
        if len(rows) <= max_lines:
            return [line for _, line, _ in rows]
        waiting = [r for r, _, w in rows if w]
        lines = [line for _, line, w in rows if not w]
        if waiting:
            lines.append(f"{len(waiting)} other rank(s) were in a collective too: "
                         f"{', '.join(map(str, waiting[:32]))}{' ...' if len(waiting) > 32 else ''}")
        return lines

    def explain(self, exc: BaseException) -> str:
        """What failed here and what every other rank was doing."""
        p = self._phase
        head = (f"rank {self.rank} (host {self.host}): a collective failed after {time.monotonic() - p.since:.1f} s "
                f"while {p.text} (launch.timeout_s {self.timeout_s:g}): {_first_line(exc)}")
        peers = self.describe_peers()
        return head + "".join(f"\n  {line}" for line in peers)


class MonitoredLoader:
    """A loader that records its waits in a :class:`RankMonitor` ("waiting for train batch
    k/N of epoch e from the data loader"); everything else is the wrapped loader's."""

    def __init__(self, loader, monitor: RankMonitor, kind: str = "train"):
        self.__dict__.update(_loader=loader, _monitor=monitor, _kind=kind)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_loader"], name)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator:
        loader, monitor, kind = self._loader, self._monitor, self._kind
        total = len(loader)
        epoch = getattr(loader, "epoch", "?")
        position = int(getattr(getattr(loader, "sampler", None), "consumed", 0) or 0)
        it = iter(loader)
        while True:
            label = f"{position + 1}/{total} of epoch {epoch}"
            monitor.set_phase(f"waiting for {kind} batch {label} from the data loader", "data")
            try:
                batch = next(it)
            except StopIteration:
                break
            monitor.set_phase(f"{'evaluating' if kind == 'cv' else 'training on'} {kind} batch {label}", "compute")
            yield batch
            position += 1
        monitor.set_phase(f"after the {kind} batches of epoch {epoch} "
                          f"({'summing CV results, checkpoint, rank-0 decisions' if kind == 'cv' else 'CV next'})",
                          "other")
