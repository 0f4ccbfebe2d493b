"""tools/netns_hosts.py itself: addresses and isolation, shaping, unplugging, cleanup (also
of a process killed by SIGTERM) and the CLI."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from tests.helpers import REPO, repo_env

TOOL = REPO / "tools" / "netns_hosts.py"
SEND = textwrap.dedent("""
    import socket, sys, time
    addr, n = sys.argv[1], int(sys.argv[2])
    s = socket.create_connection((addr, 5001), timeout=5)
    t = time.monotonic(); s.sendall(b"x" * n); s.shutdown(socket.SHUT_WR); s.recv(1)
    print(time.monotonic() - t)
""")
SINK = textwrap.dedent("""
    import socket
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 5001)); s.listen(); print("ready", flush=True)
    c, _ = s.accept()
    while c.recv(1 << 20): pass
    c.close()
""")


def send_seconds(src, dst, nbytes: int) -> float:
    """Seconds to push ``nbytes`` over TCP from host ``src`` to host ``dst`` (until the
    receiver has read them all)."""
    sink = dst.popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    assert sink.stdout.readline().strip() == "ready"
    done = src.run([sys.executable, "-c", SEND, dst.addr, str(nbytes)], timeout=60)
    assert done.returncode == 0, done.stderr
    sink.wait(timeout=10)
    return float(done.stdout)


def test_hosts_have_their_own_addresses_and_reach_each_other(make_hosts):
    a, b = make_hosts(2), make_hosts(3)
    assert a.index != b.index and len(b.hosts) == 3
    for hosts in (a, b):
        net = {h.addr.rsplit(".", 1)[0] for h in hosts.hosts}
        assert len(net) == 1 and net.pop().startswith(("198.18.", "198.19."))
        for h in hosts.hosts:
            shown = h.run(["sh", "-c", "hostname; ip -o -4 addr show"], timeout=10).stdout
            assert shown.startswith(h.name + "\n")
            assert f"inet {h.addr}/24" in shown and "inet 127.0.0.1/8" in shown
    h0, h1 = a.hosts
    assert send_seconds(h1, h0, 100_000) < 10
    other = b.hosts[0]  # another instance: another switch, unreachable
    assert h0.run([sys.executable, "-c", SEND, other.addr, "1"], timeout=30).returncode != 0


def test_rate_limits_the_link_and_link_down_silences_it(hosts2):
    h0, h1 = hosts2.hosts
    nbytes = 2_500_000  # 1.0 s at 20 Mbit/s
    hosts2.set_rate("20mbit")
    shaped = send_seconds(h1, h0, nbytes)
    assert shaped > 0.7, shaped  # (a lower bound: a busy machine only makes it slower)
    hosts2.set_rate(None)
    assert "tbf" not in h0.run(["tc", "qdisc", "show", "dev", "eth0"], timeout=10).stdout
    hosts2.link_down(1)
    t0 = time.monotonic()
    lost = h1.run([sys.executable, "-c", SEND, h0.addr, "1"], timeout=30)
    assert lost.returncode != 0 and time.monotonic() - t0 >= 1.0  # no quick refusal: silence
    hosts2.link_up(1)
    assert send_seconds(h1, h0, 1000) < 10


def test_sigterm_removes_everything(netns, tmp_path):
    """A process holding hosts is sent SIGTERM: its namespaces and the process it started
    on a host are gone when it has exited."""
    script = tmp_path / "hold.py"
    script.write_text(textwrap.dedent("""
        import time
        from tools import netns_hosts
        with netns_hosts.Hosts(2) as hosts:
            sleeper = hosts.hosts[1].popen(["sleep", "300"])
            print(hosts.hosts[0].name[:-2], sleeper.pid, flush=True)
            time.sleep(300)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=repo_env())
    base, pid = proc.stdout.readline().split()
    assert f"netns {base}h1" in netns.leftovers()
    proc.terminate()
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not [x for x in netns.leftovers() if x.split()[-1].startswith(base)], netns.leftovers()
    assert not os.path.exists(f"/proc/{pid}"), f"the process started on the host ({pid}) survived"


def test_cli_up_list_down(netns):
    up = subprocess.run([sys.executable, str(TOOL), "up", "--hosts", "2", "--rate", "100mbit"], capture_output=True,
                        text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    names = [line.split()[0] for line in up.stdout.splitlines()[:2]]
    assert all(n.startswith("ak") for n in names) and "shaped to 100mbit" in up.stdout
    listed = subprocess.run([sys.executable, str(TOOL), "list"], capture_output=True, text=True, timeout=60).stdout
    assert all(f"netns {n}" in listed for n in names)
    down = subprocess.run([sys.executable, str(TOOL), "down"], capture_output=True, text=True, timeout=60)
    assert all(f"removed netns {n}" in down.stdout for n in names), down.stdout
    assert not any(n in netns.leftovers() for n in names)
    bad = subprocess.run([sys.executable, str(TOOL), "up", "--rate", "fast"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "rate 'fast'" in bad.stderr
