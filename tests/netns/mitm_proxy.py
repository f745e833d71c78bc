"""An on-path attacker for the trust tests: a transparent TCP proxy inside one host's namespace.

The test's iptables rules send that host's connections on one plane through it (both the ones it
makes and the ones it takes); the proxy learns each connection's real destination from the
kernel (SO_ORIGINAL_DST), dials it with a firewall mark the rules let through, and pumps bytes
both ways. It records every byte it carries into CAPTURE, and on command tampers with the
stream the way an attacker on the wire can: bits flipped, bytes rewritten, dropped, repeated,
swapped, spliced from another connection, a connection's start rewritten (a downgrade), or a
whole earlier connection played again.

    mitm_proxy.py PORT MARK CAPTURE CONTROL_PORT

Commands on stdin, one JSON line each; every answer and report is a JSON line on stdout:
    {"arm": ATTACK, "kind": "control"|"data", "dir": "c2s"|"s2c"}
        the next stream of that kind and direction suffers ATTACK once, after its handshake
        ATTACK: flip, rewrite, drop, repeat, swap, splice, downgrade (a connection's first bytes)
    {"replay": "data"}  dial the destination of the earliest recorded data connection again and
                        play what its client sent, from its first byte
    {"stats": true}     connections seen, bytes carried, attacks still armed, connections closed
                        and the kind of each one still open
Reports: {"event": "applied", "attack": ..., "conn": N, ...} when an attack hits, and
{"event": "closed", "conn": N, "by": "client"|"server", "after_attack": ATTACK|null} when a
connection ends."""
import json
import os
import random
import socket
import struct
import sys
import threading
import time

SO_ORIGINAL_DST = 80
HANDSHAKE_BYTES = 128  # more than either side's hello, proof and verdict: attacks land on frames after it
CHUNK = 65536

lock = threading.Lock()
out_lock = threading.Lock()
armed = {}  # (kind, dir) -> attack
recorded = {}  # conn id -> {"dst": (host, port), "kind": ..., "c2s": bytearray (first 4 MiB)}
stats = {"connections": 0, "bytes": 0, "closed": []}
capture = None
control_port = 0
mark = 0


def say(obj):
    with out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def original_destination(sock):
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack("!H", raw[2:4])[0]
    return socket.inet_ntoa(raw[4:8]), port


def dial(dst):
    up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    up.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)  # let through by the redirect rules
    up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    up.connect(dst)
    return up


def take_armed(kind, direction):
    with lock:
        return armed.pop((kind, direction), None)


def record(data):
    with lock:
        capture.write(data)
        stats["bytes"] += len(data)


class Stream:
    """One direction of one connection."""

    def __init__(self, conn, kind, direction, record):
        self.conn, self.kind, self.dir = conn, kind, direction
        self.record = record  # the connection's: what each side sent, and the attack it suffered
        self.seen = 0
        self.held = None  # a chunk held back by `swap`
        self.attack = None  # the attack applied to this stream, once

    def tamper(self, data):
        """What goes on for `data`, the chunk just read."""
        start = self.seen
        self.seen += len(data)
        if self.held is not None:  # swap: this chunk first, then the one held back
            held, self.held = self.held, None
            return data + held
        if self.attack is not None:
            return data
        with lock:
            wanted = armed.get((self.kind, self.dir))
        if wanted is None:
            return data
        if wanted == "downgrade":  # only a connection's first bytes: the client's hello
            if start != 0 or len(data) < 6:
                return data
        elif start < HANDSHAKE_BYTES:
            return data
        attack = take_armed(self.kind, self.dir)
        if attack is None:
            return data
        self.attack = attack
        self.record["attack"] = attack
        say({"event": "applied", "attack": attack, "conn": self.conn, "kind": self.kind, "dir": self.dir,
             "at": start, "bytes": len(data)})
        changed = bytearray(data)
        where = random.randrange(len(data))
        if attack == "downgrade":
            changed[5] = 0  # the hello's mode byte: "insecure"
            return bytes(changed)
        if attack == "flip":
            changed[where] ^= 1 << random.randrange(8)
            return bytes(changed)
        if attack == "rewrite":
            end = min(len(data), where + 64)
            changed[where:end] = os.urandom(end - where)
            return bytes(changed)
        if attack == "drop":
            return b""
        if attack == "repeat":
            return data + data
        if attack == "swap":
            self.held = data
            return b""
        if attack == "splice":  # the same stretch of another connection of this kind and direction
            donor = self._donor(len(data))
            return donor if donor else data
        return data

    def _donor(self, size):
        with lock:
            for cid, r in recorded.items():
                if cid != self.conn and r["kind"] == self.kind and len(r[self.dir]) >= HANDSHAKE_BYTES + size:
                    return bytes(r[self.dir][HANDSHAKE_BYTES:HANDSHAKE_BYTES + size])
        return None


def pump(stream, src, dst, closer):
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            record(data)
            if len(stream.record[stream.dir]) < (4 << 20):
                stream.record[stream.dir] += data
            data = stream.tamper(data)
            if data:
                dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with lock:
            first = stream.conn not in [c["conn"] for c in stats["closed"]]
            report = {"event": "closed", "conn": stream.conn, "kind": stream.kind, "by": closer,
                      "after_attack": stream.record["attack"]}
            if first:
                stats["closed"].append(report)
        if first:
            say(report)


def serve(client, conn):
    try:
        dst = original_destination(client)
        server = dial(dst)
    except OSError as e:
        say({"event": "error", "conn": conn, "error": str(e)})
        client.close()
        return
    kind = "control" if dst[1] == control_port else "data"
    conn_record = {"dst": dst, "kind": kind, "c2s": bytearray(), "s2c": bytearray(), "attack": None}
    with lock:
        recorded[conn] = conn_record
        stats["connections"] += 1
    up = Stream(conn, kind, "c2s", conn_record)
    down = Stream(conn, kind, "s2c", conn_record)
    threading.Thread(target=pump, args=(up, client, server, "client"), daemon=True).start()
    pump(down, server, client, "server")


def replay_data():
    """An earlier data connection's client bytes, played again from the first byte to its destination."""
    with lock:
        old = [r for r in recorded.values() if r["kind"] == "data" and len(r["c2s"]) > HANDSHAKE_BYTES]
    if not old:
        say({"event": "replayed", "ok": False, "error": "no data connection recorded yet"})
        return
    r = old[0]
    started = time.monotonic()
    sent = 0
    answer = b""
    try:
        s = dial(r["dst"])
        s.settimeout(10)
        try:
            s.sendall(bytes(r["c2s"][:HANDSHAKE_BYTES]))
            sent = HANDSHAKE_BYTES
            while True:
                got = s.recv(CHUNK)
                if not got:
                    break
                answer += got
                if sent < len(r["c2s"]):
                    s.sendall(bytes(r["c2s"][sent:sent + CHUNK]))
                    sent += CHUNK
        except OSError:
            pass
        s.close()
    except OSError as e:
        say({"event": "replayed", "ok": False, "error": str(e)})
        return
    say({"event": "replayed", "ok": True, "dst": list(r["dst"]), "sent": sent, "answered": len(answer),
         "seconds": round(time.monotonic() - started, 3)})


def commands():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        if "arm" in cmd:
            with lock:
                armed[(cmd["kind"], cmd["dir"])] = cmd["arm"]
            say({"event": "armed", **cmd})
        elif "replay" in cmd:
            replay_data()
        elif "stats" in cmd:
            with lock:
                capture.flush()
                gone = {c["conn"] for c in stats["closed"]}
                say({"event": "stats", "connections": stats["connections"], "bytes": stats["bytes"],
                     "closed": stats["closed"], "armed": [list(k) + [v] for k, v in armed.items()],
                     "open": {cid: r["kind"] for cid, r in recorded.items() if cid not in gone}})
    os._exit(0)


def main():
    global capture, control_port, mark
    port, mark, path, control_port = int(sys.argv[1]), int(sys.argv[2], 0), sys.argv[3], int(sys.argv[4])
    capture = open(path, "wb")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(128)
    threading.Thread(target=commands, daemon=True).start()
    say({"event": "listening", "port": port})
    conn = 0
    while True:
        client, _ = listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn += 1
        threading.Thread(target=serve, args=(client, conn), daemon=True).start()


if __name__ == "__main__":
    main()
