#!/usr/bin/env python3
"""Writes the SimGrid platform XML and the smpirun host file of a cpbench platform for P ranks.

A platform is one JSON file (configs/platforms/NAME.json): the compute model the `sim` backend
reads (peak, efficiencies, memory bandwidth) and a "network" section this script turns into
SimGrid zones, one per node:

  node zone (routing Full): hosts nodeK-gpuI; GPU <-> GPU within the node over each GPU's
    intra-node port (NVLink into NVSwitch, or PCIe), a SPLITDUPLEX link per GPU, so an
    all-to-all shares each GPU's port bandwidth in each direction;
  GPU -> other nodes over that GPU's own NIC (one NIC per GPU, rail-optimised: the rail
    switches are modelled as a non-blocking fabric: one FATPIPE link per node carrying half the
    fabric latency, so a route between two nodes crosses the fabric latency once);
  or "nics_per_node" < gpus_per_node: GPUs share NICs (GPU i uses NIC i % nics_per_node).

Ranks are placed by node: rank r on node r // gpus_per_node, GPU r % gpus_per_node (the
placement cpbench's Ulysses-inner meshes assume). Usage:
  sim_platform.py PLATFORM.json P OUT_DIR   -> OUT_DIR/platform.xml, OUT_DIR/hostfile

An optional network "fabric" section gives the fabric beyond the NICs limits (otherwise it is
non-blocking, as above):
  "fabric": {"nodes_per_leaf": K, "oversubscription": X, "rail_optimized": true|false}
Nodes are grouped K by K under leaf switches. rail_optimized: NIC i of each node of a group goes
to the group's rail-i leaf (one leaf per rail per group); not rail-optimised: all the NICs of a
group's nodes go to one leaf (top of rack). A leaf's uplink to the spine carries its down-ports'
bandwidth divided by X (X = 2: 2:1 oversubscribed), each direction. A route between two NICs on
the same leaf stays there; any other inter-node route (another group, or, rail-optimised,
another rail) crosses the source leaf's uplink and the destination leaf's downlink. The fabric
latency (fabric_lat_us) is charged once per inter-node route either way (spine hops ASSUMED free
of extra latency). With a fabric the platform is one flat zone with a route per host pair.
A platform JSON may instead name a hand-written XML ("xml": path, relative to the JSON) and its
host list ("hosts": [...]); then that XML is used as is.
"""
import json
import math
import os
import sys


def fail(msg):
    sys.stderr.write("sim_platform.py: %s\n" % msg)
    sys.exit(2)


def need(d, key, where):
    if key not in d:
        fail("%s: missing '%s'" % (where, key))
    return d[key]


def gbs(x):
    return "%.6gGBps" % x


def us(x):
    return "%.6gus" % x


def gemm_efficiency(table, m, n, k):
    """The efficiency the sim backend charges an m x n x k GEMM at (kernels/sim/sim_platform.cpp
    SimPlatform::gemm_efficiency; this is its Python form, for the tools and tests): `table` is a
    platform's efficiency.gemm. A shape grid ({"shapes": [[m, n, k, eff], ...]}): the nodes' times
    (m n k / eff) interpolated multilinearly in m, n, k, each coordinate held at the grid's ends.
    A square table ({"points": [[size, eff], ...]} or a bare list): read at (m n k)^(1/3),
    linearly in log2(size), held at the ends."""
    if isinstance(table, dict) and "shapes" in table:
        eff = {(r[0], r[1], r[2]): r[3] for r in table["shapes"]}
        axes = [sorted({key[i] for key in eff}) for i in range(3)]

        def weights(axis, x):
            if len(axis) == 1 or x <= axis[0]:
                return [(axis[0], 1.0)]
            if x >= axis[-1]:
                return [(axis[-1], 1.0)]
            i = max(j for j in range(len(axis)) if axis[j] <= x)
            f = (x - axis[i]) / (axis[i + 1] - axis[i])
            return [(axis[i], 1 - f), (axis[i + 1], f)]

        work = sum(wa * wb * wc * a * b * c / eff[(a, b, c)]
                   for a, wa in weights(axes[0], m) for b, wb in weights(axes[1], n) for c, wc in weights(axes[2], k))
        cm, cn, ck = (min(max(x, ax[0]), ax[-1]) for x, ax in zip((m, n, k), axes))
        return min(1.0, cm * cn * ck / work)
    pts = table["points"] if isinstance(table, dict) else table
    size = (max(m, 1) * max(n, 1) * max(k, 1)) ** (1.0 / 3)
    if size <= pts[0][0]:
        return pts[0][1]
    if size >= pts[-1][0]:
        return pts[-1][1]
    i = max(j for j in range(len(pts)) if pts[j][0] <= size)
    (s0, e0), (s1, e1) = pts[i], pts[i + 1]
    f = (math.log2(size) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
    return e0 + f * (e1 - e0)


def fabric_options(net, path, nodes, nics):
    """The validated "fabric" section, or None (non-blocking)."""
    fab = net.get("fabric")
    if fab is None:
        return None
    where = path + " network.fabric"
    k = int(need(fab, "nodes_per_leaf", where))
    x = float(need(fab, "oversubscription", where))
    rail = need(fab, "rail_optimized", where)
    if k < 1 or x < 1 or not isinstance(rail, bool):
        fail("%s: need nodes_per_leaf >= 1, oversubscription >= 1, rail_optimized true|false "
             "(got %r, %r, %r)" % (where, fab.get("nodes_per_leaf"), fab.get("oversubscription"), rail))
    return k, x, rail


def write_fabric(w, net, nodes, g, hosts_per_node, fab):
    """The flat zone of a platform with a limited fabric (see the module comment)."""
    intra, inter = net["intra"], net["inter"]
    nics = int(net.get("nics_per_node", g))
    k, x, rail = fab
    groups = int(math.ceil(nodes / k))
    nic_bw = inter["bw_gbs"]
    half = inter.get("fabric_lat_us", 0.0) / 2

    def leaf(n, nic):  # leaf id of NIC `nic` of node n
        return "leaf%d-rail%d" % (n // k, nic) if rail else "leaf%d" % (n // k)

    leaves = [(grp, r) for grp in range(groups) for r in (range(nics) if rail else [None])]
    for n in range(nodes):
        for i in range(hosts_per_node):
            w('  <host id="node%d-gpu%d" speed="1Gf"/>' % (n, i))
        for i in range(hosts_per_node):
            w('  <link id="node%d-port%d" bandwidth="%s" latency="%s" sharing_policy="SPLITDUPLEX"/>'
              % (n, i, gbs(intra["bw_gbs"]), us(intra["lat_us"] / 2)))
        for i in range(nics):
            w('  <link id="node%d-nic%d" bandwidth="%s" latency="%s" sharing_policy="SPLITDUPLEX"/>'
              % (n, i, gbs(nic_bw), us(inter["lat_us"] / 2)))
    for grp, r in leaves:
        name = "leaf%d-rail%d" % (grp, r) if rail else "leaf%d" % grp
        down = sum(1 for n in range(grp * k, min(nodes, grp * k + k))) * (1 if rail else nics)
        # The switch itself (latency only: never the bottleneck) and its uplink to the spine.
        w('  <link id="%s" bandwidth="%s" latency="%s" sharing_policy="FATPIPE"/>'
          % (name, gbs(nic_bw * down), us(2 * half)))
        w('  <link id="%s-up" bandwidth="%s" latency="%s" sharing_policy="SPLITDUPLEX"/>'
          % (name, gbs(nic_bw * down / x), us(half)))
    hosts = [(n, i) for n in range(nodes) for i in range(hosts_per_node)]
    for a in range(len(hosts)):
        n, i = hosts[a]
        for b in range(a + 1, len(hosts)):
            m, j = hosts[b]
            if n == m:
                links = [("node%d-port%d" % (n, i), "UP"), ("node%d-port%d" % (m, j), "DOWN")]
            else:
                la, lb = leaf(n, i % nics), leaf(m, j % nics)
                mid = [(la, None)] if la == lb else [(la + "-up", "UP"), (lb + "-up", "DOWN")]
                links = [("node%d-nic%d" % (n, i % nics), "UP")] + mid + [("node%d-nic%d" % (m, j % nics), "DOWN")]
            w('  <route src="node%d-gpu%d" dst="node%d-gpu%d">%s</route>' % (n, i, m, j, "".join(
                '<link_ctn id="%s"%s/>' % (l, ' direction="%s"' % d if d else "") for l, d in links)))


def write_generated(plat, path, P, out_dir):
    net = need(plat, "network", path)
    g = int(need(net, "gpus_per_node", path + " network"))
    intra = need(net, "intra", path + " network")
    inter = net.get("inter")
    nics = int(net.get("nics_per_node", g))
    if g < 1 or nics < 1 or nics > g:
        fail("%s: need 1 <= nics_per_node <= gpus_per_node (got %d, %d)" % (path, nics, g))
    nodes = int(math.ceil(P / g))
    # cores_per_node (optional): the node's ranks time-share that many cores (the `local` platform
    # when more ranks than cores run, as mpirun --oversubscribe does here). Each core is one host;
    # local rank i runs on core i % cores, so two ranks on one core share its speed (SimGrid
    # divides a host's speed among the actors computing on it) and talk through a loopback link
    # with the intra-node rate.
    cores = int(plat.get("cores_per_node", g))
    if cores < 1:
        fail("%s: cores_per_node must be >= 1 (got %d)" % (path, cores))
    hosts_per_node = min(g, cores)
    if "max_nodes" in net and nodes > int(net["max_nodes"]):
        fail("%s: %d ranks need %d nodes of %d GPUs; this platform has %d nodes"
             % (path, P, nodes, g, int(net["max_nodes"])))
    if nodes > 1 and inter is None:
        fail("%s: %d ranks need %d nodes but the platform has no 'inter' network" % (path, P, nodes))
    L = []
    w = L.append
    w("<?xml version='1.0'?>")
    w('<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">')
    w("<!-- Generated by scripts/sim_platform.py from %s for %d ranks (%d node(s) of %d GPUs). -->"
      % (os.path.basename(path), P, nodes, g))
    w('<platform version="4.1">')
    w('<zone id="world" routing="Full">')
    fab = fabric_options(net, path, nodes, nics) if inter is not None else None
    if fab is not None and hosts_per_node < g:
        fail("%s: a network.fabric needs cores_per_node >= gpus_per_node" % path)
    if fab is not None:
        write_fabric(w, net, nodes, g, hosts_per_node, fab)
    for n in (range(nodes) if fab is None else []):
        w('  <zone id="node%d" routing="Full">' % n)
        for i in range(hosts_per_node):
            w('    <host id="node%d-gpu%d" speed="1Gf"/>' % (n, i))
        w('    <router id="node%d-gw"/>' % n)
        for i in range(hosts_per_node):
            w('    <link id="node%d-port%d" bandwidth="%s" latency="%s" sharing_policy="SPLITDUPLEX"/>'
              % (n, i, gbs(intra["bw_gbs"]), us(intra["lat_us"] / 2)))
        if hosts_per_node < g:  # ranks sharing a core talk through memory: the intra-node rate
            for i in range(hosts_per_node):
                w('    <link id="node%d-loop%d" bandwidth="%s" latency="%s"/>'
                  % (n, i, gbs(intra["bw_gbs"]), us(intra["lat_us"])))
        if inter is not None:
            for i in range(nics):
                w('    <link id="node%d-nic%d" bandwidth="%s" latency="%s" sharing_policy="SPLITDUPLEX"/>'
                  % (n, i, gbs(inter["bw_gbs"]), us(inter["lat_us"] / 2)))
        for i in range(hosts_per_node):
            if hosts_per_node < g:
                w('    <route src="node%d-gpu%d" dst="node%d-gpu%d"><link_ctn id="node%d-loop%d"/></route>'
                  % (n, i, n, i, n, i))
            for j in range(i + 1, hosts_per_node):
                w('    <route src="node%d-gpu%d" dst="node%d-gpu%d">'
                  '<link_ctn id="node%d-port%d" direction="UP"/><link_ctn id="node%d-port%d" direction="DOWN"/></route>'
                  % (n, i, n, j, n, i, n, j))
        for i in range(hosts_per_node):
            if inter is not None:
                w('    <route src="node%d-gpu%d" dst="node%d-gw"><link_ctn id="node%d-nic%d" direction="UP"/></route>'
                  % (n, i, n, n, i % nics))
        w("  </zone>")
    if nodes > 1 and fab is None:
        # The non-blocking fabric: one FATPIPE link per node (never the bottleneck: the node's NICs
        # are), half the fabric latency each. Not one link shared by every inter-node route: SimGrid
        # re-solves all the flows that share a link whenever one starts or ends, so a single fabric
        # link made every flow of the cluster one sharing system (quadratic at thousands of ranks).
        half = inter.get("fabric_lat_us", 0.0) / 2
        for n in range(nodes):
            w('  <link id="node%d-fabric" bandwidth="%s" latency="%s" sharing_policy="FATPIPE"/>'
              % (n, gbs(inter["bw_gbs"] * g), us(half)))
        for a in range(nodes):
            for b in range(a + 1, nodes):
                w('  <zoneRoute src="node%d" dst="node%d" gw_src="node%d-gw" gw_dst="node%d-gw">'
                  '<link_ctn id="node%d-fabric"/><link_ctn id="node%d-fabric"/></zoneRoute>'
                  % (a, b, a, b, a, b))
    w("</zone>")
    w("</platform>")
    with open(os.path.join(out_dir, "platform.xml"), "w") as f:
        f.write("\n".join(L) + "\n")
    hosts = ["node%d-gpu%d" % (r // g, (r % g) % hosts_per_node) for r in range(P)]
    return hosts, g


def main():
    if len(sys.argv) != 4:
        fail("usage: sim_platform.py PLATFORM.json P OUT_DIR")
    path, P, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if P < 1:
        fail("P must be >= 1, got %d" % P)
    try:
        with open(path) as f:
            plat = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (path, e))
    os.makedirs(out_dir, exist_ok=True)
    if "xml" in plat:
        xml = os.path.join(os.path.dirname(os.path.abspath(path)), plat["xml"])
        hosts = need(plat, "hosts", path)
        if P > len(hosts):
            fail("%s: %d ranks but the hand-written platform lists %d hosts" % (path, P, len(hosts)))
        with open(xml) as src, open(os.path.join(out_dir, "platform.xml"), "w") as dst:
            dst.write(src.read())
        hosts = hosts[:P]
        g = int(plat.get("network", {}).get("gpus_per_node", 0))
    else:
        hosts, g = write_generated(plat, path, P, out_dir)
    with open(os.path.join(out_dir, "hostfile"), "w") as f:
        f.write("\n".join(hosts) + "\n")
    # The platform's nodes for cpbench's --ranks-per-node (simulate.sh passes it): SMPI's
    # MPI_COMM_TYPE_SHARED groups the ranks of one simulated *host*, and a host here is one GPU
    # (or one core), not one node. Empty when the nodes are not equal blocks of ranks.
    rpn = min(P, g) if g > 0 else 0
    with open(os.path.join(out_dir, "ranks_per_node"), "w") as f:
        f.write("%d\n" % rpn if rpn > 0 and P % rpn == 0 else "\n")


if __name__ == "__main__":
    main()
