"""This host's network as a distributed job sees it: the interfaces and their addresses,
the interface the route to the master uses, and whether ``GLOO_SOCKET_IFNAME`` /
``NCCL_SOCKET_IFNAME`` name interfaces that can reach the other nodes.

No ``ip`` command is needed: addresses come from ``getifaddrs(3)`` (through ctypes) and the
route from the kernel's choice of source address for a UDP socket connected to the master
(``connect`` on a UDP socket sends nothing).  :func:`check_socket_ifname` runs before the
process group is created, so a wrong interface is a one-line error instead of a hang.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import os
import socket
import sys
import time
from typing import Callable, Mapping, Optional

SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


class NetworkCheckError(RuntimeError):
    """The socket-interface settings cannot work on this host (message: one line)."""


class PortUnreachable(NetworkCheckError):
    """:func:`wait_for_port` gave up.  ``refused``: its last attempt was actively refused
    (the host answered, nothing listens on the port) rather than unanswered or unrouted."""

    def __init__(self, message: str, refused: bool):
        super().__init__(message)
        self.refused = refused


class _SockAddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_uint16), ("data", ctypes.c_uint8 * 26)]


class _SockAddrBSD(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint8), ("family", ctypes.c_uint8), ("data", ctypes.c_uint8 * 26)]


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [("next", ctypes.POINTER(_IfAddrs)), ("name", ctypes.c_char_p), ("flags", ctypes.c_uint),
                     ("addr", ctypes.c_void_p), ("netmask", ctypes.c_void_p), ("ifu", ctypes.c_void_p),
                     ("data", ctypes.c_void_p)]


def _sockaddr_text(ptr: int) -> Optional[str]:
    """The IPv4/IPv6 address of a ``struct sockaddr *`` (None for other families)."""
    layout = _SockAddrBSD if sys.platform == "darwin" or "bsd" in sys.platform else _SockAddr
    sa = layout.from_address(ptr)
    raw = bytes(sa.data)
    if sa.family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[2:6])  # after the port
    if sa.family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, raw[6:22])  # after port and flowinfo
    return None


def interface_addresses() -> dict[str, list[str]]:
    """Every interface of this host (its network namespace) -> its IPv4 then IPv6
    addresses, as text without prefix length, in the kernel's order; an interface without
    an address maps to ``[]``.  Interfaces are in index order (``lo`` first on Linux)."""
    names = [name for _, name in sorted(socket.if_nameindex())]
    result: dict[str, list[str]] = {name: [] for name in names}
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"getifaddrs: {os.strerror(err)}")
    try:
        v4: dict[str, list[str]] = {}
        v6: dict[str, list[str]] = {}
        node = head
        while node:
            entry = node.contents
            if entry.addr:
                text = _sockaddr_text(entry.addr)
                if text is not None:
                    name = entry.name.decode(errors="replace")
                    (v4 if ":" not in text else v6).setdefault(name, []).append(text)
            node = entry.next
    finally:
        libc.freeifaddrs(head)
    for name in list(v4) + list(v6):
        result.setdefault(name, [])
    for name in result:
        result[name] = v4.get(name, []) + v6.get(name, [])
    return result


def resolve(host: str) -> str:
    """``host`` (address or name) as an address, IPv4 preferred; NetworkCheckError when it
    does not resolve."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.getaddrinfo(host, None, family, socket.SOCK_DGRAM)[0][4][0]
        except (socket.gaierror, UnicodeError, IndexError):
            continue
    raise NetworkCheckError(f"master address {host!r} does not resolve on this host")


def route_interface(dest: str, addresses: Optional[dict[str, list[str]]] = None) -> str:
    """The interface this host uses to reach ``dest`` (address or host name).

    When ``dest`` is an address of this host, the interface holding it (so on node 0 the
    answer is its network interface, not ``lo``); otherwise the interface holding the
    source address the kernel picks for a UDP socket connected to ``dest`` (its route's
    preferred source; ``lo`` for loopback destinations).  NetworkCheckError when ``dest``
    does not resolve or there is no route to it."""
    addresses = interface_addresses() if addresses is None else addresses
    ip = resolve(dest)
    holders = [name for name, addrs in addresses.items() if ip in addrs]
    if holders:
        return next((h for h in holders if h != "lo"), holders[0])
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((ip, 9))
        except OSError as e:
            raise NetworkCheckError(f"no route to the master {ip} from this host: {e.strerror or e}") from None
        source = sock.getsockname()[0]
    holders = [name for name, addrs in addresses.items() if source in addrs]
    if not holders:
        raise NetworkCheckError(f"the route to the master {ip} uses source address {source}, "
                                f"which no interface of this host holds")
    return next((h for h in holders if h != "lo"), holders[0])


def describe_addresses(addresses: dict[str, list[str]]) -> str:
    """``lo: 127.0.0.1, eth0: 10.0.0.2 fd00::2, ib0: (none)`` (link-local IPv6 left out)."""
    parts = []
    for name, addrs in addresses.items():
        shown = [a for a in addrs if not a.lower().startswith("fe80:")]
        parts.append(f"{name}: {' '.join(shown) if shown else '(no address)'}")
    return ", ".join(parts)


def nccl_matches(value: str, names: list[str]) -> list[str]:
    """The interfaces of ``names`` that ``NCCL_SOCKET_IFNAME=value`` selects: a comma list
    of prefixes; ``=`` before the list means exact names, ``^`` means every interface except
    those prefixes (``^=`` exact exclusions)."""
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    items = [v for v in value.split(",") if v]

    def hit(name: str) -> bool:
        return any(name == i if exact else name.startswith(i) for i in items)

    return [n for n in names if hit(n) != exclude]


def _selected(var: str, value: str, addresses: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """(interfaces the variable selects that have an address, names in it that select
    nothing usable).  Gloo takes a comma list of exact names, each needing an address."""
    if var == "NCCL_SOCKET_IFNAME":
        chosen = [n for n in nccl_matches(value, list(addresses)) if addresses[n]]
        return chosen, ([] if chosen else [value])
    names = [v for v in value.split(",") if v]
    return [n for n in names if addresses.get(n)], [n for n in names if not addresses.get(n)]


def is_local_address(host: str, addresses: Optional[dict[str, list[str]]] = None) -> bool:
    """``host`` resolves to a loopback address or to an address of this host."""
    ip = resolve(host)
    if ipaddress.ip_address(ip.split("%")[0]).is_loopback:
        return True
    addresses = interface_addresses() if addresses is None else addresses
    return any(ip in addrs for addrs in addresses.values())


def wait_for_port(host: str, port: int, timeout_s: float, interval_s: float = 1.0,
                  on_retry: Optional[Callable[[str], None]] = None) -> float:
    """Wait until a TCP connection to ``host:port`` succeeds (it is closed at once, nothing
    is sent); returns the seconds waited.  Refused, unreachable and silent (timed-out)
    attempts are retried every ``interval_s`` until ``timeout_s`` has passed, then
    :class:`PortUnreachable` names the address, the port and the last failure.
    ``on_retry(last_failure)`` is called after each failed attempt (e.g. to show progress)."""
    start = time.monotonic()
    deadline = start + timeout_s
    ip = resolve(host)
    last, refused = "no attempt", False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            with socket.create_connection((ip, port), timeout=min(5.0, max(0.1, left))):
                return time.monotonic() - start
        except socket.timeout:
            last, refused = "no answer (packets dropped: a firewall, a wrong address or a link down)", False
        except OSError as e:
            last, refused = e.strerror or str(e), isinstance(e, ConnectionRefusedError)
        if on_retry is not None:
            on_retry(last)
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
    shown = host if host == ip else f"{host} ({ip})"
    raise PortUnreachable(f"{shown} port {port} did not accept a connection within {timeout_s:g} s "
                          f"(last attempt: {last})", refused)


def master_host(init_method: str, environ: Mapping[str, str]) -> Optional[str]:
    """The master's host for ``init_method``: ``MASTER_ADDR`` for ``env://``, the host of
    ``tcp://host:port``; None for ``file://`` (no master)."""
    if init_method.startswith("env://"):
        return environ.get("MASTER_ADDR") or None
    if init_method.startswith("tcp://"):
        hostport = init_method[len("tcp://"):].split("/", 1)[0]
        if hostport.startswith("["):  # [ipv6]:port
            return hostport[1:].split("]", 1)[0]
        return hostport.rsplit(":", 1)[0] if ":" in hostport else hostport
    return None


def is_multi_node(environ: Mapping[str, str]) -> bool:
    """torchrun's environment describes ranks on more than one node (``WORLD_SIZE`` >
    ``LOCAL_WORLD_SIZE``)."""
    try:
        return int(environ.get("WORLD_SIZE", "1")) > int(environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return False


def check_socket_ifname(master_addr: Optional[str], environ: Mapping[str, str], backend: Optional[str] = None,
                        multi_node: Optional[bool] = None,
                        addresses: Optional[dict[str, list[str]]] = None) -> None:
    """Raise NetworkCheckError (one line) when ``GLOO_SOCKET_IFNAME`` or
    ``NCCL_SOCKET_IFNAME`` in ``environ`` cannot work here.

    Checked: ``GLOO_SOCKET_IFNAME`` (unless ``backend`` is ``nccl``) and
    ``NCCL_SOCKET_IFNAME`` (unless ``backend`` is ``gloo``), when set and not empty:

    * every name in the gloo list is an interface of this host with an address; the NCCL
      value (prefixes, ``=``/``^`` forms) selects at least one interface with an address;
    * when the job spans nodes (``multi_node``; None = :func:`is_multi_node` of
      ``environ``) and ``master_addr`` is given and is not a loopback address: the
      interface the route to the master uses (:func:`route_interface`) is among the selected
      ones -- other nodes reach this one through that interface, not through a docker
      bridge or an unrouted port.

    The message names the variable, its value, this host's interfaces with their
    addresses and the interface to use."""
    addresses = interface_addresses() if addresses is None else addresses
    multi_node = is_multi_node(environ) if multi_node is None else multi_node
    host = socket.gethostname()
    checked = [v for v in SOCKET_IFNAME_VARS if environ.get(v)
               and not (backend == "nccl" and v == "GLOO_SOCKET_IFNAME")
               and not (backend == "gloo" and v == "NCCL_SOCKET_IFNAME")]
    if not checked:
        return
    route, route_error = None, None
    if master_addr:
        try:
            route = route_interface(master_addr, addresses)
        except NetworkCheckError as e:
            route_error = str(e)
    seen = f"interfaces of this host ({host}): {describe_addresses(addresses)}"
    if route:
        fix = f"the route to the master {master_addr} uses {route}: set {{var}}={route}"
    elif route_error:
        fix = route_error
    else:
        fix = "set {var} to the interface that reaches the other nodes"
    for var in checked:
        value = environ[var]
        chosen, unusable = _selected(var, value, addresses)
        if unusable:
            what = ("selects no interface with an address" if var == "NCCL_SOCKET_IFNAME"
                    else "names no interface of this host with an address" if len(unusable) == len(value.split(","))
                    else f"names {', '.join(unusable)}, not an interface of this host with an address")
            raise NetworkCheckError(f"{var}={value} {what}; {seen}; {fix.format(var=var)}")
        if not (multi_node and master_addr and route):
            continue
        try:
            loopback = ipaddress.ip_address(resolve(master_addr)).is_loopback
        except (ValueError, NetworkCheckError):
            loopback = False
        if not loopback and route not in chosen:
            raise NetworkCheckError(
                f"{var}={value} does not carry the route to the master {master_addr} (the other nodes "
                f"would never reach this one: the job would hang until launch.timeout_s); {seen}; "
                f"{fix.format(var=var)}")
