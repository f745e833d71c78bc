"""The RDMA verbs backend for real: two qemu VMs with Soft-RoCE (rdma_rxe) joined by two rails,
running the deltacast-bench binary built on this machine. A 64 MiB transfer is verified by hash on
the receiver; one rail is cut (`ip link set eth1 down` in the sender's VM) mid-transfer and the
transfer still completes on the other. Where no VM can boot, the test is skipped with the reason."""
import json
import os
import tempfile
import time

import pytest

import vm

BIN = os.path.abspath(os.environ.get("DELTACAST_BIN_DIR", "build/bin"))
CACHE = os.path.abspath(os.environ.get("DELTACAST_VM_CACHE", os.path.join(BIN, "..", "vm")))
MIB = 1 << 20
BYTES = 64 * MIB
PORTS = (7471, 7472)


@pytest.fixture(scope="module")
def vm_parts():
    if os.geteuid() != 0:
        pytest.skip("booting the VMs with this machine's root filesystem shared read-only needs root")
    try:
        kernel, modules_root, version = vm.prepare_kernel(CACHE)
        initramfs = vm.build_initramfs(CACHE, modules_root, version)
    except vm.VmUnavailable as e:
        pytest.skip(f"no VM can boot here: {e}")
    return kernel, initramfs, modules_root


def run_pair(parts, receiver_body, sender_body, timeout=240):
    """Boots the receiver's VM (listening ends of the rails) and the sender's; returns both outboxes."""
    kernel, initramfs, modules_root = parts
    os.makedirs(CACHE, exist_ok=True)
    work = tempfile.mkdtemp(prefix="run-", dir=CACHE)
    ports = [vm.free_port(), vm.free_port()]
    jobs = {}
    for name, addresses, body in (("receiver", ["198.18.0.2", "198.18.1.2"], receiver_body),
                                  ("sender", ["198.18.0.1", "198.18.1.1"], sender_body)):
        jobs[name] = os.path.join(work, f"{name}.sh")
        with open(jobs[name], "w") as f:
            f.write(vm.host_script(modules_root, addresses, body))
    machines = []
    try:
        receiver = vm.Vm("receiver", kernel, initramfs, jobs["receiver"], [("listen", p) for p in ports], work, 2)
        machines.append(receiver)
        time.sleep(0.5)  # its sockets listen before the sender's VM connects to them
        sender = vm.Vm("sender", kernel, initramfs, jobs["sender"], [("connect", p) for p in ports], work, 1)
        machines.append(sender)
        started = time.monotonic()
        rc_sender = sender.wait(timeout)
        rc_receiver = receiver.wait(max(10, timeout - (time.monotonic() - started)))
    except Exception:
        for m in machines:
            m.kill()
        raise
    if rc_sender is None and rc_receiver is None and "Kernel panic" in open(os.path.join(work, "sender.console")).read():
        pytest.skip("the VM kernel panicked at boot")
    return work, rc_sender, rc_receiver, sender.log(), receiver.log()


def read_json(path):
    with open(path) as f:
        return json.loads(f.read().strip().splitlines()[-1])


def test_a_cut_rail_mid_transfer_over_soft_roce(vm_parts):
    bench = os.path.join(BIN, "deltacast-bench")
    listen = ",".join(f"198.18.{i}.2:{p}" for i, p in enumerate(PORTS))
    receiver = (f"DELTACAST_LOG=debug {bench} wire --role recv --transport rdma --listen {listen} --bytes {BYTES} "
                f"--json --seed 7 > /mnt/recv.json 2> /mnt/recv.log")
    rails = " ".join(f"--rail 198.18.{i}.1=198.18.{i}.2:{p}" for i, p in enumerate(PORTS))
    # First a sender with the wrong token: refused, with the reason, on every attempt.
    intruder = (f"DELTACAST_LOG=debug {bench} wire --role send --transport rdma {rails} --bytes {MIB} --token 666 "
                f"--baseline-seconds 0 --connect-timeout 15000 > /dev/null 2> /mnt/intruder.log && exit 9\n")
    discovery = f"{bench} rails --json > /mnt/rails.json\n"
    sender = discovery + intruder + (f"DELTACAST_LOG=debug {bench} wire --role send --transport rdma {rails} --bytes {BYTES} --json --seed 7 "
              f"--baseline-seconds 0 --connect-timeout 30000 --fail-command 'ip link set eth1 down' --fail-at 400 "
              f"> /mnt/send.json 2> /mnt/send.log")
    work, rc_sender, rc_receiver, sender_log, receiver_log = run_pair(vm_parts, receiver, sender)
    send_err = open(os.path.join(work, "sender", "send.log")).read() if os.path.exists(
        os.path.join(work, "sender", "send.log")) else ""
    recv_err = open(os.path.join(work, "receiver", "recv.log")).read() if os.path.exists(
        os.path.join(work, "receiver", "recv.log")) else ""
    context = f"sender job:\n{sender_log}\n{send_err}\nreceiver job:\n{receiver_log}\n{recv_err}"
    assert rc_sender == 0 and rc_receiver == 0, context
    sent = read_json(os.path.join(work, "sender", "send.json"))
    received = read_json(os.path.join(work, "receiver", "recv.json"))
    print(json.dumps({"sent": sent["per_rail"], "seconds": sent["trials"][0]["seconds"],
                      "received_gbps": received["aggregate_gbps"]}))
    assert sent["transport"] == "rdma" and received["transport"] == "rdma", context
    assert received["bytes"] == BYTES and received["verified"], "the receiver's bytes differ from the payload"
    assert sent["verified"]
    cut, kept = sent["per_rail"][1], sent["per_rail"][0]
    # The cut happened mid-transfer: the rail carried slices before it, then lost its share.
    assert cut["bytes"] > 0, context
    assert cut["state"] != "healthy" or sent["trials"][0]["resent_slices"] > 0, context
    assert kept["bytes"] > cut["bytes"]
    assert "port down" in send_err, "the port event should pause the cut rail at once"
    rails_found = read_json(os.path.join(work, "sender", "rails.json"))["rdma_ports"]
    found = {(p["device"], p["netdev"], tuple(p["ipv4"]), p["active"]) for p in rails_found}
    assert found == {("rxe0", "eth0", ("198.18.0.1",), True), ("rxe1", "eth1", ("198.18.1.1",), True)}, rails_found
    intruder_err = open(os.path.join(work, "sender", "intruder.log")).read()
    assert "wrong token" in intruder_err, intruder_err[-2000:]
    assert "wrong token" in recv_err, "the receiver logs why it refused"
