#!/usr/bin/env python3
"""Several "hosts" on this machine, each in its own Linux network namespace, joined by a
switch whose links can be shaped (``tc ... tbf``) and unplugged.  For tests and benchmarks
of multi-node training; standard library only (no asrkit, no torch).

Topology of one :class:`Hosts` instance with index ``k`` (0-511) and ``n`` hosts:

* namespace ``<prefix><k>br`` holds the switch: a bridge ``br0`` and, per host ``i``, the
  switch end ``p<i>`` of a veth pair;
* namespace ``<prefix><k>h<i>`` is host ``i``: ``lo`` (up) and ``eth0``, the host end of
  its veth pair, with address ``198.(18 + k // 256).(k % 256).(i + 1)/24`` -- the RFC 2544
  benchmarking range 198.18.0.0/15, one /24 per instance.  The root namespace is not
  touched (nothing of it is reachable from the hosts, and nothing in it changes).

``k`` is the first index whose lock file ``/tmp/ak_netns/<prefix><k>.lock`` this process
can ``flock`` and for which no namespace of that name exists, so instances in parallel
processes (pytest-xdist workers, other sessions) never collide; the lock is held until
:meth:`Hosts.close`.  Shaping puts a ``tbf`` qdisc on both ends of every host link, so
each direction of each link is limited to the rate.  :meth:`Hosts.link_down` sets the
switch end of a host's link down (the cable pulled at the switch): the host keeps its
address and routes, and its packets vanish without an error.

Cleanup: :meth:`Hosts.close` (also ``__exit__``, ``atexit``, SIGTERM while an instance is
open, and Ctrl-C through ``__exit__``) kills the process groups it started and every
process still inside its namespaces, then deletes the namespaces (which deletes their
links).  ``python tools/netns_hosts.py down`` removes whatever an earlier, killed run left.

CLI::

    python tools/netns_hosts.py up [--hosts N] [--rate 1gbit]   # create, print, keep
    python tools/netns_hosts.py list                           # what exists
    python tools/netns_hosts.py down [--force]                 # remove leftovers and kept hosts

``up`` prints one line per host (``name addr iface``); run a command on a host with
``ip netns exec <name> <command>``.  Hosts made by ``up`` are marked kept
(``/tmp/ak_netns/<prefix><k>.kept``): the tests' leak check does not count them, ``down``
removes them.  ``down`` leaves alone the instances whose lock a live process holds (a
running test) unless ``--force``.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from typing import Optional

LOCK_DIR = "/tmp/ak_netns"
MAX_INSTANCES = 512  # /24 networks in 198.18.0.0/15
HOST_IFACE = "eth0"
_TBF_LATENCY = "100ms"

# Popen objects started by any Host of this process, for the leak check (all_started()).
_STARTED: list = []
# Instances of this process that are open (created and not closed yet).
_OPEN: list = []


class NetnsError(RuntimeError):
    """A namespace, link or qdisc could not be created or changed."""


def _ip(*args: str, ns: Optional[str] = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {proc.stderr.strip() or f'exit status {proc.returncode}'}")
    return proc


def netns_available() -> tuple[bool, str]:
    """(True, "") when namespaces can be made here: root, ``ip`` and ``tc`` on PATH, and a
    test namespace could be created and removed; else (False, the reason)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"'{tool}' (iproute2) is not installed"
    name = f"akprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return False, f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return True, ""


def _tbf_args(rate: str) -> list[str]:
    """tbf parameters for ``rate``: a bucket of 4 ms at that rate (at least 64 KiB, so a
    GSO packet passes) and a queue of 100 ms."""
    bits = _rate_bits(rate)
    burst = max(65536, int(bits / 8 * 0.004))
    return ["tbf", "rate", rate, "burst", str(burst), "latency", _TBF_LATENCY]


def _rate_bits(rate: str) -> float:
    """Bits per second of a tc rate string (``100mbit``, ``1gbit``, ``10gbit``, ``500kbit``)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(|k|m|g|t)bit", rate.strip().lower())
    if not m:
        raise ValueError(f"rate {rate!r}: expected a number and kbit, mbit, gbit or tbit (e.g. 1gbit)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]


def namespace_pids(ns: str) -> list[int]:
    """Processes whose network namespace is ``ns`` (``ip netns pids``)."""
    proc = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def _namespaces() -> list[str]:
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def _root_links() -> list[str]:
    proc = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    names = []
    for line in proc.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


class Host:
    """One namespaced host: ``name`` (its namespace), ``addr`` (IPv4, no prefix length),
    ``iface`` (the interface holding ``addr`` inside the namespace)."""

    def __init__(self, name: str, addr: str, iface: str = HOST_IFACE):
        self.name, self.addr, self.iface = name, addr, iface
        self._procs: list = []

    def __repr__(self) -> str:
        return f"Host({self.name}, {self.addr}, {self.iface})"

    def popen(self, argv, env=None, **kw) -> subprocess.Popen:
        """Start ``argv`` inside this host's namespace, in a new process group (session)
        that :meth:`Hosts.close` kills if it is still alive.  Where ``unshare`` exists the
        command also gets its own UTS namespace whose host name is :attr:`name`, so what
        it logs as its host tells the hosts apart."""
        kw.setdefault("start_new_session", True)
        prefix = ["ip", "netns", "exec", self.name]
        if shutil.which("unshare") and shutil.which("hostname"):
            prefix += ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', self.name]
        proc = subprocess.Popen([*prefix, *argv], env=env, **kw)
        self._procs.append(proc)
        _STARTED.append(proc)
        return proc

    def run(self, argv, env=None, timeout=None, **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` inside the namespace to completion (like ``subprocess.run``); on
        timeout the whole process group is killed, then ``TimeoutExpired`` is raised."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        stdin = kw.pop("input", None)
        capture = kw.pop("capture_output")
        if capture:
            kw.setdefault("stdout", subprocess.PIPE)
            kw.setdefault("stderr", subprocess.PIPE)
        if stdin is not None:
            kw["stdin"] = subprocess.PIPE
        proc = self.popen(argv, env=env, **kw)
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def kill_started(self) -> None:
        """SIGKILL the process groups this host started (see :meth:`popen`)."""
        for proc in self._procs:
            _kill_group(proc)
        self._procs.clear()

    def kill_all(self) -> None:
        """SIGKILL every process inside this host's namespace, including those that left
        the process groups :meth:`popen` made (e.g. torchrun's workers, in sessions of
        their own), then reap the groups this host started."""
        for pid in namespace_pids(self.name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.kill_started()


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (started with a new session) and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
        pass


class Hosts:
    """``n`` namespaced hosts on one switch (see the module docstring).  A context manager:
    created on ``__enter__`` (or :meth:`open`), removed on ``__exit__``/:meth:`close`."""

    def __init__(self, n: int = 2, rate: Optional[str] = None, prefix: str = "ak"):
        if n < 1 or n > 250:
            raise ValueError(f"n={n}: between 1 and 250 hosts")
        if rate is not None:
            _rate_bits(rate)
        self.n, self.rate, self.prefix = n, rate, prefix
        self.hosts: list[Host] = []
        self.index: Optional[int] = None
        self.switch_ns = ""
        self._lock_fd: Optional[int] = None
        self._lock = threading.Lock()
        self._old_sigterm = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "Hosts":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> "Hosts":
        """Create the namespaces, links and addresses; on any failure remove what was made."""
        if self.index is not None:
            return self
        self._claim_index()
        _OPEN.append(self)
        atexit.register(self.close)
        self._install_sigterm()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _claim_index(self) -> None:
        os.makedirs(LOCK_DIR, exist_ok=True)
        existing = set(_namespaces())
        for k in range(MAX_INSTANCES):
            base = f"{self.prefix}{k}"
            if any(re.fullmatch(rf"{re.escape(base)}(br|h\d+)", ns) for ns in existing):
                continue
            fd = os.open(os.path.join(LOCK_DIR, f"{base}.lock"), os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            with contextlib.suppress(FileNotFoundError):  # (a stale mark: its namespaces are gone)
                os.unlink(os.path.join(LOCK_DIR, f"{base}.kept"))
            self.index, self._lock_fd, self.switch_ns = k, fd, f"{base}br"
            return
        raise NetnsError(f"no free instance index: {MAX_INSTANCES} '{self.prefix}<k>' instances in use")

    def _build(self) -> None:
        k = self.index
        net = f"198.{18 + k // 256}.{k % 256}"
        _ip("ip", "netns", "add", self.switch_ns)
        _ip("ip", "link", "add", "br0", "type", "bridge", ns=self.switch_ns)
        _ip("ip", "link", "set", "br0", "up", ns=self.switch_ns)
        for i in range(self.n):
            name = f"{self.prefix}{k}h{i}"
            _ip("ip", "netns", "add", name)
            # Both ends are created inside the switch namespace, then one moves to the host:
            # nothing named by this instance ever appears in the root namespace.
            _ip("ip", "link", "add", f"p{i}", "type", "veth", "peer", "name", f"h{i}", ns=self.switch_ns)
            _ip("ip", "link", "set", f"h{i}", "netns", name, "name", HOST_IFACE, ns=self.switch_ns)
            _ip("ip", "link", "set", f"p{i}", "master", "br0", ns=self.switch_ns)
            _ip("ip", "link", "set", f"p{i}", "up", ns=self.switch_ns)
            host = Host(name, f"{net}.{i + 1}")
            _ip("ip", "link", "set", "lo", "up", ns=name)
            _ip("ip", "addr", "add", f"{host.addr}/24", "dev", HOST_IFACE, ns=name)
            _ip("ip", "link", "set", HOST_IFACE, "up", ns=name)
            self.hosts.append(host)
        if self.rate is not None:
            self.set_rate(self.rate)

    def _install_sigterm(self) -> None:
        """SIGTERM -> SystemExit (so ``finally``/``__exit__`` clean up) while the default
        handler is in place and this is the main thread; restored by close()."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            def _on_term(signum, frame):
                raise SystemExit(128 + signum)
            self._old_sigterm = signal.SIG_DFL
            signal.signal(signal.SIGTERM, _on_term)

    def close(self) -> None:
        """Kill the processes this instance started and any process left inside its
        namespaces, delete the namespaces, release the index.  Idempotent."""
        with self._lock:
            if self.index is None:
                return
            for host in self.hosts:
                host.kill_all()
            names = [f"{self.prefix}{self.index}h{i}" for i in range(self.n)] + [self.switch_ns]
            for ns in names:
                _remove_namespace(ns)
            os.close(self._lock_fd)
            self.index, self._lock_fd = None, None
            if self in _OPEN:
                _OPEN.remove(self)
            if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, self._old_sigterm)
                self._old_sigterm = None

    # ------------------------------------------------------------------ link control

    def set_rate(self, rate: Optional[str]) -> None:
        """Limit every host link to ``rate`` in each direction (tbf on the host end and the
        switch end); ``None`` removes the shaping."""
        if rate is not None:
            _rate_bits(rate)
        for i, host in enumerate(self.hosts):
            for ns, dev in ((host.name, HOST_IFACE), (self.switch_ns, f"p{i}")):
                _ip("tc", "qdisc", "del", "dev", dev, "root", ns=ns, check=False)
                if rate is not None:
                    _ip("tc", "qdisc", "add", "dev", dev, "root", *_tbf_args(rate), ns=ns)
        self.rate = rate

    def link_down(self, i: int) -> None:
        """Unplug host ``i`` at the switch: its packets are dropped silently."""
        _ip("ip", "link", "set", f"p{i}", "down", ns=self.switch_ns)

    def link_up(self, i: int) -> None:
        """Plug host ``i`` back in."""
        _ip("ip", "link", "set", f"p{i}", "up", ns=self.switch_ns)


def _remove_namespace(ns: str) -> None:
    """Kill every process inside ``ns``, then delete it (its links go with it)."""
    for _ in range(3):
        pids = namespace_pids(ns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:  # reap our own children; others are reaped by their parents
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _instance_of(name: str, prefix: str) -> Optional[str]:
    m = re.fullmatch(rf"({re.escape(prefix)}\d+)(br|h\d+)", name)
    return m.group(1) if m else None


def _in_use(base: str, kept_too: bool) -> bool:
    """Instance ``base`` is in use, not a leftover: its lock is held by a process other
    than this one's open instances, or (``kept_too``) ``up`` kept it until ``down``."""
    if any(f"{h.prefix}{h.index}" == base for h in _OPEN):
        return False
    if kept_too and os.path.exists(os.path.join(LOCK_DIR, f"{base}.kept")):
        return True
    path = os.path.join(LOCK_DIR, f"{base}.lock")
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def leftovers(prefix: str = "ak", ignore_live: bool = False, ignore_kept: Optional[bool] = None) -> list[str]:
    """Namespaces (``netns <name>``), root-namespace links (``link <name>``) and processes
    inside those namespaces (``pid <n> in <name>``) whose names start with ``prefix``.

    With ``ignore_live``, instances whose lock another live process holds (its hosts are
    in use, e.g. by a parallel test worker) are left out, and so (``ignore_kept``, default:
    as ``ignore_live``) are those the CLI's ``up`` kept; this process's own open instances
    are always reported."""
    ignore_kept = ignore_live if ignore_kept is None else ignore_kept
    found = []
    for ns in _namespaces():
        if not ns.startswith(prefix):
            continue
        base = _instance_of(ns, prefix)
        if ignore_live and base and _in_use(base, kept_too=ignore_kept):
            continue
        found.append(f"netns {ns}")
        found += [f"pid {pid} in {ns}" for pid in namespace_pids(ns)]
    found += [f"link {name}" for name in _root_links() if name.startswith(prefix)]
    return found


def all_started() -> list[subprocess.Popen]:
    """Every process that a Host of this process started and that is still running."""
    return [p for p in _STARTED if p.poll() is None]


def remove_leftovers(prefix: str = "ak", force: bool = False) -> list[str]:
    """Remove the namespaces and root-namespace links that :func:`leftovers` lists (all of
    them with ``force``, else only those no live process holds); returns what it removed."""
    gone = leftovers(prefix, ignore_live=not force, ignore_kept=False)
    for item in gone:
        kind, name = item.split()[0], item.split()[-1]
        if kind == "netns":
            _remove_namespace(name)
            base = _instance_of(name, prefix)
            if base:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(LOCK_DIR, f"{base}.kept"))
        elif kind == "link":
            subprocess.run(["ip", "link", "del", name], capture_output=True)
    return gone


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create hosts and leave them in place")
    up.add_argument("--hosts", type=int, default=2)
    up.add_argument("--rate", default=None, help="tc rate of every host link, e.g. 1gbit")
    up.add_argument("--prefix", default="ak")
    ls = sub.add_parser("list", help="list ak* namespaces, links and processes")
    ls.add_argument("--prefix", default="ak")
    down = sub.add_parser("down", help="remove leftovers")
    down.add_argument("--prefix", default="ak")
    down.add_argument("--force", action="store_true", help="also instances a live process holds")
    args = ap.parse_args(argv)
    ok, why = netns_available()
    if not ok:
        print(f"netns_hosts: {why}", file=sys.stderr)
        return 2
    if args.cmd == "up":
        try:
            hosts = Hosts(args.hosts, rate=args.rate, prefix=args.prefix)
        except ValueError as e:
            print(f"netns_hosts: {e}", file=sys.stderr)
            return 2
        hosts.open()
        atexit.unregister(hosts.close)  # kept on purpose: 'down' removes them
        with open(os.path.join(LOCK_DIR, f"{args.prefix}{hosts.index}.kept"), "w") as f:
            f.write(f"kept by 'netns_hosts.py up' (pid {os.getpid()})\n")
        for host in hosts.hosts:
            print(host.name, host.addr, host.iface)
        print(f"switch {hosts.switch_ns} (bridge br0, ports p0..p{args.hosts - 1})"
              + (f", every link shaped to {args.rate}" if args.rate else ""))
        return 0
    if args.cmd == "list":
        for item in leftovers(args.prefix):
            print(item)
        return 0
    for item in remove_leftovers(args.prefix, force=args.force):
        print("removed", item)
    return 0


if __name__ == "__main__":
    sys.exit(main())
