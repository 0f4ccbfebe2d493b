"""The failures table of docs/multinode.md quotes the network faults as the code words them
(the tests next to this file produce each message on namespaced hosts)."""
from __future__ import annotations

import re

from tests.helpers import REPO


def test_network_rows_quote_the_code():
    page = (REPO / "docs" / "multinode.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| ([^|]+?) \| (.+?) \| [^|]+ \|$", page, re.M)}
    sources = "".join(p.read_text(encoding="utf-8") for p in [*(REPO / "asrkit").rglob("*.py"),
                                                               REPO / "tools" / "wait_for_master.py"])
    expected = {
        "another node cannot reach node 0": ["cannot reach the master: ", "did not accept a connection within",
                                            "--rdzv_timeout SECONDS"],
        "an interface name that does not exist": ["names no interface of this host with an address",
                                                  "interfaces of this host (", "the route to the master "],
        "an existing but wrong interface (a docker bridge, an unrouted port)": [
            "does not carry the route to the master", "the job would hang until launch.timeout_s"],
        "a node's link goes down during training (cable, switch port)": [
            "a collective failed after", "status unreadable (", "no answer from the store within"],
    }
    for row, fragments in expected.items():
        assert row in rows, sorted(rows)
        for fragment in fragments:
            assert fragment in rows[row], (row, fragment)
            assert fragment.split("(")[0].strip() in sources, fragment
    assert "not reproducible on one machine" not in page
