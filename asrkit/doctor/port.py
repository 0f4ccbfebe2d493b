"""The ``master port`` check.

torchrun's static rendezvous (the recipe's ``--master_addr A --master_port P``) opens its
store on node 0 at port P, bound on every address of node 0; the other nodes connect to
A:P.  So on node 0 the port must be free (:func:`check_port_free`: bindable both on A and
on the wildcard address) and A must be one of node 0's addresses; on the other nodes A:P
must accept a TCP connection (:func:`wait_port_reachable`, with a progress line on stderr
every 10 s of the wait: ``asrkit.doctor.waiting``), which it does once node 0's doctor
listens there (the doctor's own rendezvous uses the same port).  Addresses are resolved,
and the port waited for, by ``asrkit.train.dist.network``.  A loopback master address in a
job of several nodes is a WARN on every node (:func:`check_master_address`), whatever the
port's line.  :func:`master_endpoint` takes the address and port from the options, else
from ``MASTER_ADDR``/``MASTER_PORT``, else torchrun's defaults.
"""
from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Mapping, Optional

from asrkit.doctor.results import CheckResult, fail, ok, warn
from asrkit.doctor.waiting import WaitProgress
from asrkit.train.dist import network

CHECK = "master port"
RETRY_S = 0.5  # pause between connection attempts while node 0 is not listening yet
DEFAULT_ADDR, DEFAULT_PORT = "127.0.0.1", 29500  # torchrun's


class EndpointError(ValueError):
    """``MASTER_PORT`` in the environment is not a port number."""


def master_endpoint(addr: Optional[str], port: Optional[int], environ: Mapping[str, str]) -> tuple[str, int]:
    """The master's address and port: each from its option when given, else from
    ``MASTER_ADDR``/``MASTER_PORT`` in ``environ``, else torchrun's defaults (127.0.0.1, 29500).
    :class:`EndpointError` for a ``MASTER_PORT`` that is not an integer."""
    addr = addr or environ.get("MASTER_ADDR") or DEFAULT_ADDR
    if port is None:
        text = environ.get("MASTER_PORT") or str(DEFAULT_PORT)
        try:
            port = int(text)
        except ValueError:
            raise EndpointError(f"MASTER_PORT={text!r} in the environment is not a port number (pass "
                                f"--master_port or unset it)") from None
    return addr, port


def resolve(host: str) -> tuple[int, str]:
    """``(family, ip)`` of ``host`` (``asrkit.train.dist.network.resolve``: IPv4 first);
    NetworkCheckError when it does not resolve."""
    ip = network.resolve(host)
    return (socket.AF_INET6 if ":" in ip else socket.AF_INET), ip


def is_loopback(ip: str) -> bool:
    return ipaddress.ip_address(ip).is_loopback


def check_master_address(master_addr: str, num_nodes: int) -> list[CheckResult]:
    """Every node: a WARN for a loopback master address in a job of several nodes (only
    processes of this one machine can reach it); ``[]`` otherwise (an address that does not
    resolve is the port line's FAIL)."""
    try:
        _, ip = resolve(master_addr)
    except network.NetworkCheckError:
        return []
    if num_nodes > 1 and is_loopback(ip):
        return [warn(CHECK, f"master_addr {master_addr} is a loopback address ({ip}): only nodes on this same "
                            f"machine can reach it",
                     "on a cluster pass node 0's IP address on the network the nodes share")]
    return []


def _bind_error(sock_family: int, address: tuple) -> Optional[OSError]:
    """The error binding a listening-style TCP socket (SO_REUSEADDR, as torch's store sets)
    to ``address``, or None when it binds."""
    with socket.socket(sock_family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            return e
    return None


def check_port_free(master_addr: str, port: int) -> list[CheckResult]:
    """Node 0: ``master_addr`` is an address of this host and ``port`` is free on it and on
    the wildcard address."""
    try:
        family, ip = resolve(master_addr)
    except network.NetworkCheckError as e:
        return [fail(CHECK, str(e), "pass node 0's IP address as --master_addr (or fix the host name)")]
    error = _bind_error(family, (ip, port))
    if error is None:
        error = _bind_error(family, ("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    if error is not None and error.errno == errno.EADDRNOTAVAIL:
        return [fail(CHECK, f"master_addr {master_addr} ({ip}) is not an address of this host, but this is node 0 "
                            f"(--node_rank 0), which must hold it",
                     "run node rank 0 on the host that has master_addr, or pass this host's address (see the "
                     "network lines) as --master_addr on every node")]
    if error is not None and error.errno == errno.EADDRINUSE:
        return [fail(CHECK, f"port {port} is in use on this host (another job, or a torchrun still running)",
                     f"pick a free port with --master_port (the same on every node), or end the process holding "
                     f"it (ss -ltnp 'sport = :{port}')")]
    if error is not None:
        return [fail(CHECK, f"cannot bind {ip}:{port}: {error.strerror or error}",
                     "use a port above 1024 that this user may bind (--master_port)")]
    return [ok(CHECK, f"{ip}:{port} is free on this host (node 0 listens there)")]


def wait_port_reachable(master_addr: str, port: int, timeout_s: float) -> list[CheckResult]:
    """Other nodes: connect to ``master_addr:port`` until it accepts or ``timeout_s`` passes
    (``asrkit.train.dist.network.wait_for_port``: node 0's doctor may start later than this
    one), with a progress line on stderr every 10 s; one line, with the fix for a refused
    connection (nothing listens yet) or for any other failure (no answer, no route)."""
    try:
        family, ip = resolve(master_addr)
    except network.NetworkCheckError as e:
        return [fail(CHECK, str(e), "pass node 0's IP address as --master_addr (or fix the host name)")]
    progress = WaitProgress(f"node 0 to listen at {ip}:{port}", timeout_s)
    try:
        waited = network.wait_for_port(ip, port, timeout_s, interval_s=RETRY_S,
                                       on_retry=lambda last: progress.tick(f"last attempt: {last}"))
    except network.NetworkCheckError as e:
        if isinstance(e, network.PortUnreachable) and e.refused:
            fix = ("start asrkit doctor --node_rank 0 on node 0 with the same --master_addr/--master_port (it must "
                   "be running while this node checks), or fix --master_port")
        else:
            fix = (f"check that master_addr is node 0's address on the network this node shares with it (see the "
                   f"network lines), and that a firewall lets TCP port {port} (and the ports gloo/nccl open) through")
        return [fail(CHECK, str(e), fix)]
    return [ok(CHECK, f"{ip}:{port} reachable (after {waited:.1f} s)")]
