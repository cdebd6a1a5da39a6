#!/usr/bin/env python3
"""Checks a simulated network probe (net_probe's JSON on stdin or in a file) against the link
numbers of its platform JSON: ping-pong latency and bandwidth within a node at the intra-node
rate, across nodes at the NIC rate, and all-to-all times at the bound set by the busiest port.
  check_net.py PLATFORM.json PROBE_OUTPUT
Exit 1 with the offending numbers when one is off."""
import json
import sys


def main():
    plat = json.load(open(sys.argv[1]))
    text = open(sys.argv[2]).read()
    line = [l for l in text.splitlines() if l.startswith("{")]
    if not line:
        print("check_net.py: no probe JSON in %s:\n%s" % (sys.argv[2], text[-2000:]))
        return 1
    m = json.loads(line[-1])
    net = plat["network"]
    g, B, P = m["gpus_per_node"], m["bytes"], m["ranks"]
    intra, inter = net["intra"], net.get("inter")
    nics = net.get("nics_per_node", g)
    rows = []  # (what, simulated, expected, rel tolerance; ping-pongs may also be off by 0.1 us)

    lat = intra["lat_us"] * 1e-6
    bw = intra["bw_gbs"] * 1e9
    rows.append(("intra ping-pong 8 B (latency)", m["intra_small_s"], lat + 8 / bw, 0.02))
    rows.append(("intra ping-pong %d B" % B, m["intra_big_s"], lat + B / bw, 0.02))
    # Each GPU's port carries (g-1) chunks of B/g out and in: the all-to-all's lower bound.
    rows.append(("intra-node all-to-all", m["alltoall_node_s"], (g - 1) * (B / g) / bw, 0.10))
    if P > g and inter:
        ilat = (inter["lat_us"] + inter.get("fabric_lat_us", 0)) * 1e-6
        ibw = inter["bw_gbs"] * 1e9
        rows.append(("inter ping-pong 8 B (latency)", m["inter_small_s"], ilat + 8 / ibw, 0.02))
        rows.append(("inter ping-pong %d B" % B, m["inter_big_s"], ilat + B / ibw, 0.02))
        chunk = B / P
        remote = (P - g) * chunk * (g / nics)  # bytes through one NIC
        local = (g - 1) * chunk
        rows.append(("world all-to-all", m["alltoall_world_s"], max(remote / ibw, local / bw), 0.10))
    bad = 0
    for what, sim, exp, tol in rows:
        if "all-to-all" in what:
            ok = 1 - 1e-6 <= sim / exp <= 1 + tol
        else:  # SMPI adds a few hundredths of a microsecond to tiny messages on slow links
            ok = abs(sim / exp - 1) <= tol or abs(sim - exp) <= 0.1e-6
        bad += not ok
        print("%-34s simulated %12.3f us  expected %12.3f us  ratio %.4f  %s"
              % (what, sim * 1e6, exp * 1e6, sim / exp, "ok" if ok else "OFF (tolerance %g)" % tol))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
