"""The ``network`` check: this host's interfaces, the route to the master, and the
interface gloo/nccl will use.

Built on ``asrkit.train.dist.network`` (the functions the training's own start-up check
uses): :func:`~asrkit.train.dist.network.interface_addresses`,
:func:`~asrkit.train.dist.network.route_interface` and
:func:`~asrkit.train.dist.network.check_socket_ifname`.  Lines:

* the interfaces and their addresses (OK);
* the interface the route to the master uses (OK), or FAIL when there is none;
* ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` when set: they name interfaces of this host
  that carry that route (OK), else FAIL with the interface to use;
* when ``GLOO_SOCKET_IFNAME`` is unset in a job of several nodes: gloo then listens on the
  address its host name resolves to -- FAIL when that is a loopback address or no address
  of this host (the other nodes could not connect; ``/etc/hosts`` mapping the node's name to
  ``127.0.1.1`` is the classic case), WARN when it is on another interface than the route;
  with the nccl backend, an unset ``NCCL_SOCKET_IFNAME`` is a WARN (nccl picks an interface
  by its own rules).
"""
from __future__ import annotations

import ipaddress
import socket
from typing import Mapping, Optional

from asrkit.doctor.results import CheckResult, fail, first_line, ok, warn
from asrkit.train.dist.network import (NetworkCheckError, check_socket_ifname, describe_addresses,
                                       interface_addresses, resolve, route_interface)

CHECK = "network"


def export_fix(iface: str) -> str:
    return f"export GLOO_SOCKET_IFNAME={iface} NCCL_SOCKET_IFNAME={iface} (on this node, before the recipe)"


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def hostname_address(host: Optional[str] = None) -> Optional[str]:
    """The address the host name resolves to, IPv4 first (what gloo's default device
    binds); None when it does not resolve."""
    host = host or socket.gethostname()
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.getaddrinfo(host, None, family, socket.SOCK_STREAM)[0][4][0]
        except (socket.gaierror, UnicodeError, IndexError):
            continue
    return None


def check_gloo_default(addresses: dict[str, list[str]], route: str) -> CheckResult:
    """Several nodes, ``GLOO_SOCKET_IFNAME`` unset: where gloo's default device would listen."""
    host = socket.gethostname()
    ip = hostname_address(host)
    holders = [name for name, addrs in addresses.items() if ip in addrs] if ip else []
    if ip is None:
        return fail(CHECK, f"GLOO_SOCKET_IFNAME is unset and this host's name {host} does not resolve: gloo falls "
                           f"back to the loopback address, which the other nodes cannot reach", export_fix(route))
    if _is_loopback(ip) or not holders:
        where = "a loopback address" if _is_loopback(ip) else "no address of this host"
        return fail(CHECK, f"GLOO_SOCKET_IFNAME is unset and this host's name {host} resolves to {ip} ({where}): gloo "
                           f"would listen there and the other nodes could not connect", export_fix(route))
    if route not in holders:
        return warn(CHECK, f"GLOO_SOCKET_IFNAME is unset: gloo listens on {ip} ({holders[0]}, the address of the "
                           f"host name {host}), but the route to the master uses {route}", export_fix(route))
    return ok(CHECK, f"GLOO_SOCKET_IFNAME is unset: gloo listens on {ip} ({route}, the address of the host name "
                     f"{host}), the interface of the route to the master")


def check_network(master_addr: str, num_nodes: int, environ: Mapping[str, str],
                  backend: Optional[str] = None) -> list[CheckResult]:
    """The network lines (see the module doc); ``backend`` is the training's resolved
    backend (None: unknown), ``environ`` where the socket variables are read."""
    try:
        addresses = interface_addresses()
    except OSError as e:
        return [fail(CHECK, f"cannot list this host's interfaces: {first_line(e)}", "")]
    results = [ok(CHECK, f"interfaces of this host ({socket.gethostname()}): {describe_addresses(addresses)}")]
    try:
        route = route_interface(master_addr, addresses)
    except NetworkCheckError as e:
        return results + [fail(CHECK, str(e), "pass node 0's address as --master_addr, on a network this node "
                                              "is on (see the interfaces above and 'ip route')")]
    master_ip = resolve(master_addr)
    via = ", ".join(a for a in addresses.get(route, []) if not a.lower().startswith("fe80:"))
    results.append(ok(CHECK, f"the route to the master {master_addr} ({master_ip}) uses {route}"
                             + (f" ({via})" if via else "")))
    multi = num_nodes > 1
    try:
        check_socket_ifname(master_addr, environ, None, multi_node=multi, addresses=addresses)
    except NetworkCheckError as e:
        return results + [fail(CHECK, str(e), export_fix(route))]
    set_vars = [f"{v}={environ[v]}" for v in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if environ.get(v)]
    if set_vars:
        results.append(ok(CHECK, f"{', '.join(set_vars)}: interface(s) of this host"
                                 + (" carrying the route to the master" if multi else "")))
    if not multi or _is_loopback(master_ip):
        return results
    if not environ.get("GLOO_SOCKET_IFNAME"):
        results.append(check_gloo_default(addresses, route))
    if backend == "nccl" and not environ.get("NCCL_SOCKET_IFNAME"):
        results.append(warn(CHECK, "NCCL_SOCKET_IFNAME is unset: nccl picks an interface by its own rules "
                                   f"(InfiniBand first, then any but lo/docker), maybe not {route}",
                            export_fix(route)))
    return results
