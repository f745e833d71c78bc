"""Drives deltacast-testbed (network-namespace hosts and rails) from Python tests.

    with Testbed(binary, hosts=["a", "b"], rails=[("a", "b", "1gbit")]) as tb:
        tb.spawn("b", ["deltacast-bench", ...])     # a process inside host b
        tb.down(0); tb.up(0); tb.rate(0, "50mbit")

    Switched planes join every host (one port each, shaped per port):
        Testbed(binary, hosts=["p", "c0", "c1"], planes=["1gbit", "1gbit"])
        tb.plane_address(0, "c1"); tb.plane_rate(1, "c1", "300mbit")

    Sites: each plane has a bridge per site, and every two sites are joined on
    each plane by a WAN link shaped to `wan_rate` and delayed `wan_delay_ms` each way:
        Testbed(binary, hosts=[...], planes=["1gbit"], sites={"p": "east", "c0": "west"},
                wan_rate="200mbit", wan_delay_ms=20)
        tb.wan_down(0, "east", "west"); tb.wan_bytes_into("west")
    `management_plane=True` adds one more plane, unshaped and spanning the sites (control).

Teardown happens when the context ends, also on failure (the C++ testbed's
destructor removes every namespace it made)."""
import json
import os
import subprocess


class TestbedUnavailable(Exception):
    pass


class Testbed:
    def __init__(self, binary, hosts, rails=(), planes=(), sites=None, wan_rate=None, wan_delay_ms=0,
                 management_plane=False):
        args = [binary]
        for h in hosts:
            args += ["--host", h]
        for rail in rails:
            args += ["--rail", ":".join(x for x in rail if x)]
        for rate in planes:
            args += ["--plane", rate or "-"]
        for host, site in (sites or {}).items():
            args += ["--site", f"{host}={site}"]
        if wan_rate:
            args += ["--wan-rate", wan_rate]
        if wan_delay_ms:
            args += ["--wan-delay-ms", str(wan_delay_ms)]
        if management_plane:
            args += ["--management-plane"]
        self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
        line = self._proc.stdout.readline()
        if not line:
            err = self._proc.stderr.read()
            self._proc.wait()
            if self._proc.returncode == 77:
                raise TestbedUnavailable(err.strip())
            raise RuntimeError(f"deltacast-testbed failed: {err}")
        info = json.loads(line)
        self.hosts = info["hosts"]
        self.rails = info["rails"]
        self.planes = info["planes"]
        self.switch = info["switch"]
        self.sites = info["sites"]
        self.wans = info["wans"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write("exit\n")
                self._proc.stdin.flush()
            except BrokenPipeError:
                pass
            self._proc.wait(timeout=30)

    def _command(self, text):
        self._proc.stdin.write(text + "\n")
        self._proc.stdin.flush()
        answer = self._proc.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"testbed command '{text}': {answer}")

    def down(self, rail):
        self._command(f"down {rail}")

    def up(self, rail):
        self._command(f"up {rail}")

    def rate(self, rail, rate):
        self._command(f"rate {rail} {rate}")

    def plane_down(self, plane, host):
        self._command(f"pdown {plane} {host}")

    def plane_up(self, plane, host):
        self._command(f"pup {plane} {host}")

    def plane_rate(self, plane, host, rate):
        self._command(f"prate {plane} {host} {rate}")

    def wan_down(self, plane, a, b):
        """Cuts the WAN link between sites a and b on a plane: frames are dropped silently, both ways."""
        self._command(f"wdown {plane} {a} {b}")

    def wan_up(self, plane, a, b):
        self._command(f"wup {plane} {a} {b}")

    def wan_bytes_into(self, site, planes=None):
        """{source site: bytes that crossed into `site` over the WAN links from it}, summed over planes."""
        counters = self._interface_counters(["ip", "netns", "exec", self.switch, "cat", "/proc/net/dev"])
        into = {}
        for wan in self.wans:
            if wan["to"] == site and (planes is None or wan["plane"] in planes):
                into[wan["from"]] = into.get(wan["from"], 0) + counters[wan["interface"]]
        return into

    def wan_bytes_sent(self, site, to):
        """Bytes `site`'s switch sent toward site `to` over their WAN links (all planes), whether
        they arrived or not (a cut link drops them after this count)."""
        counters = self._interface_counters(["ip", "netns", "exec", self.switch, "cat", "/proc/net/dev"], sent=True)
        # The link's port in `site`'s bridge is the one that delivers what comes from `to`.
        return sum(counters[wan["interface"]] for wan in self.wans if wan["from"] == to and wan["to"] == site)

    def plane_address(self, plane, host):
        return self.planes[plane]["addresses"][host]

    def received_bytes(self, host):
        """{interface: bytes that arrived on it} in a host's namespace, loopback left out."""
        counters = self._interface_counters(self.netns_argv(host, ["cat", "/proc/net/dev"]))
        return {name: received for name, received in counters.items() if name != "lo"}

    @staticmethod
    def _interface_counters(argv, sent=False):
        """{interface: received (or sent) bytes} from a namespace's /proc/net/dev."""
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        column = 8 if sent else 0
        return {name.strip(): int(counters.split()[column]) for name, counters in
                (line.split(":", 1) for line in out.splitlines()[2:])}

    def netns_argv(self, host, argv):
        return ["ip", "netns", "exec", self.hosts[host]] + list(argv)

    def spawn(self, host, argv, **kwargs):
        """Starts a process inside a host's namespace."""
        return subprocess.Popen(self.netns_argv(host, argv), **kwargs)


def binary(name):
    """Path of a deltacast binary in the build tree (DELTACAST_BIN_DIR, set by CTest)."""
    return os.path.join(os.environ.get("DELTACAST_BIN_DIR", "build/bin"), name)
