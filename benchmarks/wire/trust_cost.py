#!/usr/bin/env python3
"""What the trust modes cost, measured in one run: deltacast-bench wire (a transfer sprayed over
several loopback rails) and deltacast-bench sync (a full version, then sparse versions, to
consumer processes) under --protection insecure, authenticated and encrypted, the modes
interleaved round by round (the order rotating) so that the machine's noise falls on all of
them alike. Reports each mode's median and its ratio to insecure's median.

  python3 benchmarks/wire/trust_cost.py build/bin/deltacast-bench [--rounds 5] [--bytes 536870912]
      [--rails 3] [--sync-elements 16777216] [--sync-versions 4] [--rail-rate 3gbit] [--json out.json]
      [--piece-helpers auto|on|off|compare] [--aes-gcm auto|ipsec-mb|openssl|compare]
      [--leaf-tags payload|off|compare]

On loopback the transfer runs as fast as the CPUs copy, so every pass over the bytes shows in
full; --piece-helpers compare runs each wire transfer twice, its payload work inline and on a
helper thread beside each rail end (wire --piece-helpers); --aes-gcm compare runs each
authenticated and encrypted transfer under both libraries that compute AES-GCM (the bench's
--aes-gcm; insecure uses neither; the sync runs use the first, ipsec-mb); --leaf-tags compare runs
each authenticated transfer with its payload's leaf tags made once as it was made (as the engine's
producer does: each rail then tags only its frames' headers) and with each rail tagging every
payload it sends (wire --leaf-tags payload and off); --rail-rate puts each
process in a network namespace with every rail shaped to that rate (needs root), where the network
is the bound, as on a cluster.
"""
import argparse
import json
import statistics
import subprocess
import sys

MODES = ["insecure", "authenticated", "encrypted"]


def run(command, timeout):
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"trust_cost: {' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def shaped(args, per_rail):
    """The flags that shape the rails (wire takes a rate per rail, sync one for every port)."""
    if not args.rail_rate:
        return []
    return ["--netns", "--rail-rate", ",".join([args.rail_rate] * args.rails) if per_rail else args.rail_rate]


def wire_run(bench, args, mode, helpers, library, leaf_tags):
    """Gbit/s of one transfer, and the mode and AES-GCM library the bench says it ran."""
    report = run([bench, "wire", "--rails", str(args.rails), "--bytes", str(args.bytes), "--trials", "1",
                  "--baseline-seconds", "0", "--json", "--protection", mode, "--piece-helpers", helpers,
                  "--aes-gcm", library, "--leaf-tags", leaf_tags, *shaped(args, per_rail=True)],
                 timeout=600)
    if report["leaf_tags"] != (mode == "authenticated" and leaf_tags == "payload"):
        sys.exit(f"trust_cost: wire under {mode} with --leaf-tags {leaf_tags} says leaf tags {report['leaf_tags']}")
    return report["aggregate_gbps"], report["protection"], report["aes_gcm"]


def library_usable(bench, library):
    """Whether this build and CPU can seal with the library (the bench refuses it otherwise)."""
    probe = subprocess.run([bench, "wire", "--rails", "1", "--bytes", "65536", "--trials", "1", "--baseline-seconds",
                            "0", "--json", "--aes-gcm", library], capture_output=True, text=True, timeout=120)
    return probe.returncode == 0


def sync_seconds(bench, args, mode, library):
    """The median time of the run's sparse versions (every one exact, or the run fails)."""
    report = run([bench, "sync", "--consumers", "2", "--rails", "2", "--elements", str(args.sync_elements),
                  "--versions", str(args.sync_versions), "--gloo", "off", "--no-dense", "--json",
                  "--protection", mode, "--aes-gcm", library, *shaped(args, per_rail=False)], timeout=900)
    if not report["all_exact"]:
        sys.exit(f"trust_cost: sync under {mode} was not exact")
    sparse = [row["seconds"] for row in report["versions"] if not row["full"]]
    return statistics.median(sparse)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes", type=int, default=512 << 20)
    parser.add_argument("--rails", type=int, default=3)
    parser.add_argument("--sync-elements", type=int, default=1 << 24)
    parser.add_argument("--sync-versions", type=int, default=4)
    parser.add_argument("--rail-rate", help="shape every rail to this tbf rate (e.g. 3gbit) in network namespaces")
    parser.add_argument("--json", help="write the figures here as well")
    parser.add_argument("--piece-helpers", default="auto", choices=["auto", "on", "off", "compare"],
                        help="wire's --piece-helpers; compare: each transfer with them off and on")
    parser.add_argument("--aes-gcm", default="auto", choices=["auto", "ipsec-mb", "openssl", "compare"],
                        help="wire's --aes-gcm; compare: each sealed transfer under ipsec-mb and under openssl")
    parser.add_argument("--leaf-tags", default="payload", choices=["payload", "off", "compare"],
                        help="wire's --leaf-tags: authenticated payloads tagged once as made (payload, as the "
                             "engine does) or by each rail as it sends them (off); compare: both")
    args = parser.parse_args()

    helpers = ["off", "on"] if args.piece_helpers == "compare" else [args.piece_helpers]
    libraries = ["ipsec-mb", "openssl"] if args.aes_gcm == "compare" else [args.aes_gcm]
    if args.aes_gcm == "compare" and not library_usable(args.bench, "ipsec-mb"):
        print("trust_cost: ipsec-mb is not usable in this build or on this CPU: openssl only", file=sys.stderr)
        libraries = ["openssl"]

    leaf_choices = ["payload", "off"] if args.leaf_tags == "compare" else [args.leaf_tags]

    def libraries_of(mode):
        return libraries[:1] if mode == "insecure" else libraries  # insecure seals nothing

    def configurations(mode):  # (library, leaf tags): only authenticated transfers make leaf tags
        leaf = leaf_choices if mode == "authenticated" else leaf_choices[:1]
        return [(lib, lt) for lib in libraries_of(mode) for lt in leaf]

    wire = {(m, h, lib, lt): [] for m in MODES for h in helpers for lib, lt in configurations(m)}
    used = {key: [] for key in wire}
    sync = {m: [] for m in MODES}
    ran = {m: [] for m in MODES}
    for r in range(args.rounds):
        order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
        for mode in order:
            for h in helpers:
                for lib, lt in configurations(mode):
                    gbps, protection, library = wire_run(args.bench, args, mode, h, lib, lt)
                    wire[(mode, h, lib, lt)].append(gbps)
                    used[(mode, h, lib, lt)].append(library)
            ran[mode].append(protection)
            # The sparse versions (tens of KB) under the first library only: no library moves them.
            sync[mode].append(sync_seconds(args.bench, args, mode, libraries[0]))
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)

    figures = {"rounds": args.rounds, "bytes": args.bytes, "rails": args.rails, "sync_elements": args.sync_elements,
               "rail_rate": args.rail_rate, "piece_helpers": args.piece_helpers, "aes_gcm": args.aes_gcm,
               "leaf_tags": args.leaf_tags,
               "modes": {}}
    base_sync = statistics.median(sync["insecure"])
    print(f"| mode | piece helpers | AES-GCM | leaf tags | wire Gbit/s (median of {args.rounds}) | vs insecure "
          "| sparse version s (median) | vs insecure |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in MODES:
        s = statistics.median(sync[mode])
        figures["modes"][mode] = {"protection": ran[mode], "sync_seconds": sync[mode], "sync_median_seconds": s,
                                  "sync_ratio": s / base_sync}
        for h in helpers:
            # Each against insecure with the same helpers: what the mode costs where both run alike.
            base_wire = statistics.median(wire[("insecure", h, libraries[0], leaf_choices[0])])
            for lib, lt in configurations(mode):
                key_of = (mode, h, lib, lt)
                w = statistics.median(wire[key_of])
                key = ("" if len(helpers) == 1 else f"_helpers_{h}") + \
                      ("" if len(libraries_of(mode)) == 1 else f"_{lib.replace('-', '_')}") + \
                      ("" if len(configurations(mode)) == len(libraries_of(mode)) else f"_leaf_tags_{lt}")
                figures["modes"][mode].update({f"wire_gbps{key}": wire[key_of], f"wire_median_gbps{key}": w,
                                               f"wire_ratio{key}": w / base_wire,
                                               f"aes_gcm{key}": used[key_of]})
                library = "-" if mode == "insecure" else used[key_of][0]
                leaf = lt if mode == "authenticated" else "-"
                print(f"| {mode} | {h} | {library} | {leaf} | {w:.2f} | {w / base_wire:.2f}x | {s:.4f} "
                      f"| {s / base_sync:.2f}x |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
