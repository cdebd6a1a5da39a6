#!/usr/bin/env python3
"""A fabric with limits (network.fabric, scripts/sim_platform.py): the network probe on a base
platform (two nodes of G GPUs, one NIC per GPU) with a non-blocking fabric and with fabric
variants; each variant's world all-to-all time over the non-blocking one must be the ratio the
fabric implies, and the same-rail ping-pong across nodes (one flow) must not change.
  check_fabric.py SIMULATE_SH PROBE BASE.json OUT_DIR
Ratios (the all-to-all is NIC-bound on the base platform; chunk c per pair, R = G*c per NIC):
  one node per leaf, 2:1 oversubscribed: every cross-node byte crosses a leaf uplink of G*bw/2,
    G*R bytes each way -> 2.0;
  two nodes on one leaf per rail, 2:1 (rail-optimised): cross-rail bytes, (G-1)/G of them, leave
    the rail leaf through an uplink of 2*bw/2 = bw, 2*R*(G-1)/G bytes -> 2*(G-1)/G (1.5 at G = 4);
  two nodes on one top-of-rack leaf, 2:1 (not rail-optimised): nothing crosses an uplink -> 1.0.
Exit 1 with the numbers when one is off."""
import json
import os
import subprocess
import sys

VARIANTS = [  # name, fabric, expected all-to-all ratio as a function of G
    ("oversub2_leaf1", {"nodes_per_leaf": 1, "oversubscription": 2, "rail_optimized": False}, lambda g: 2.0),
    ("rail_leaf2_os2", {"nodes_per_leaf": 2, "oversubscription": 2, "rail_optimized": True},
     lambda g: 2.0 * (g - 1) / g),
    ("tor_leaf2_os2", {"nodes_per_leaf": 2, "oversubscription": 2, "rail_optimized": False}, lambda g: 1.0),
    ("nonblocking_leaf1", {"nodes_per_leaf": 1, "oversubscription": 1, "rail_optimized": True}, lambda g: 1.0),
]


def probe(simulate, exe, plat, g, out):
    r = subprocess.run([simulate, "--platform", plat, "-np", str(2 * g), "--exe", exe, "--", str(g), "67108864"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not lines:
        print("probe on %s failed (rc %d):\n%s" % (plat, r.returncode, r.stdout[-2000:]))
        sys.exit(1)
    with open(out, "w") as f:
        f.write(r.stdout)
    return json.loads(lines[-1])


def main():
    simulate, exe, base_path, out_dir = sys.argv[1:5]
    os.makedirs(out_dir, exist_ok=True)
    base = json.load(open(base_path))
    g = int(base["network"]["gpus_per_node"])
    if base["network"].get("nics_per_node", g) != g or "fabric" in base["network"]:
        print("check_fabric.py: the base platform needs one NIC per GPU and no fabric")
        return 1
    ref = probe(simulate, exe, base_path, g, os.path.join(out_dir, "fabric_base.txt"))
    bad = 0
    for name, fab, ratio in VARIANTS:
        plat = json.loads(json.dumps(base))
        plat["network"]["fabric"] = fab
        path = os.path.join(out_dir, "fabric_%s.json" % name)
        with open(path, "w") as f:
            json.dump(plat, f)
        m = probe(simulate, exe, path, g, os.path.join(out_dir, "fabric_%s.txt" % name))
        got, want = m["alltoall_world_s"] / ref["alltoall_world_s"], ratio(g)
        pp = m["inter_big_s"] / ref["inter_big_s"]
        ok = abs(got / want - 1) <= 0.02 and abs(pp - 1) <= 1e-6
        bad += not ok
        print("%-18s world all-to-all x%.4f (expected x%.4f)  same-rail ping-pong x%.6f (expected x1)  %s"
              % (name, got, want, pp, "ok" if ok else "OFF"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
