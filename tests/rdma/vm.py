"""Two-host RDMA testbed: qemu VMs running Debian's own kernel with Soft-RoCE (rdma_rxe),
joined by qemu socket links (one per rail) on 127.0.0.1.

Each VM boots a small busybox initramfs that mounts this machine's root filesystem
read-only over virtio-9p and chroots into it, so the binaries built here run unchanged
in the VM; a second, writable 9p share carries each VM's output back. A VM runs one
shell script (its job) and powers off.

VmUnavailable says why a VM cannot run on this machine (no qemu, no kernel package,
no modules): tests turn it into a skip with that reason, never a pass."""
import glob
import os
import shutil
import socket
import subprocess
import tempfile

# Modules the initramfs loads to reach the host's root over 9p and to have virtio NICs;
# modprobe --show-depends puts them in dependency order.
INITRAMFS_MODULES = ["virtio_pci", "9pnet_virtio", "9p", "virtio_net"]


INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in /mods/*.ko; do insmod "$m" || echo "vm-init: insmod $m failed"; done
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /host || echo "vm-init: no host root"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 outbox /host/mnt || echo "vm-init: no outbox"
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
mount -t tmpfs run /host/run
chroot /host /bin/sh "$dc_job" > /host/mnt/job.log 2>&1
echo "$?" > /host/mnt/job.rc
sync
echo o > /proc/sysrq-trigger
sleep 30
"""


class VmUnavailable(Exception):
    pass


def _run(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def kernel_package():
    """Name of the kernel image package that Debian's linux-image-amd64 depends on (the package
    lists are fetched once when this machine has none yet)."""
    out, error = "", "no answer"
    for attempt in range(2):
        try:
            out = _run(["apt-cache", "depends", "linux-image-amd64"]).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            out = ""
            error = e
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("Depends:") and "linux-image-" in line:
                return line.split()[-1]
        if attempt == 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
    raise VmUnavailable(f"apt names no kernel image for linux-image-amd64 ({out.strip() or error})")


def prepare_kernel(cache):
    """Downloads and unpacks Debian's kernel into `cache` once; returns (vmlinuz, modules root, version)."""
    os.makedirs(cache, exist_ok=True)
    root = os.path.join(cache, "root")
    done = os.path.join(cache, "ready")
    if not os.path.exists(done):
        package = kernel_package()
        for old in glob.glob(os.path.join(cache, "*.deb")):
            os.remove(old)
        shutil.rmtree(root, ignore_errors=True)
        try:
            _run(["apt-get", "download", package], cwd=cache)
            deb = glob.glob(os.path.join(cache, "*.deb"))[0]
            _run(["dpkg-deb", "-x", deb, root])
            version = os.listdir(os.path.join(root, "lib", "modules"))[0]
            _run(["depmod", "-b", root, version])
        except (OSError, IndexError, subprocess.CalledProcessError) as e:
            raise VmUnavailable(f"cannot unpack the kernel package: {getattr(e, 'stderr', '') or e}")
        open(done, "w").write(version)
    version = open(done).read().strip()
    vmlinuz = os.path.join(root, "boot", f"vmlinuz-{version}")
    if not os.path.exists(vmlinuz):
        raise VmUnavailable(f"no kernel image at {vmlinuz}")
    return vmlinuz, root, version


def build_initramfs(cache, modules_root, version):
    path = os.path.join(cache, "initramfs.cpio")
    if os.path.exists(path):
        return path
    busybox = shutil.which("busybox")
    if not busybox:
        raise VmUnavailable("busybox (busybox-static) is not installed")
    with open(busybox, "rb") as f:
        if b"ld-linux" in f.read(4096):  # an ELF interpreter: the dynamic build, useless without its libc
            raise VmUnavailable(f"{busybox} is dynamically linked: install busybox-static")
    stage = tempfile.mkdtemp(dir=cache)
    try:
        for d in ("bin", "proc", "sys", "dev", "mods"):
            os.makedirs(os.path.join(stage, d))
        shutil.copy(busybox, os.path.join(stage, "bin", "busybox"))
        ordered = []
        for name in INITRAMFS_MODULES:
            plan = _run(["modprobe", "-d", modules_root, "-S", version, "--show-depends", name]).stdout
            for line in plan.splitlines():
                module = line.split()[1] if line.startswith("insmod ") else None
                if module and module not in ordered:
                    ordered.append(module)
        for i, module in enumerate(ordered):
            shutil.copy(module, os.path.join(stage, "mods", f"{i:02d}-{os.path.basename(module)}"))
        with open(os.path.join(stage, "init"), "w") as f:
            f.write(INIT)
        os.chmod(os.path.join(stage, "init"), 0o755)
        files = subprocess.run("find . | cpio -o -H newc", shell=True, cwd=stage, check=True, capture_output=True)
        with open(path + ".part", "wb") as f:
            f.write(files.stdout)
        os.rename(path + ".part", path)
    except (OSError, subprocess.CalledProcessError) as e:
        raise VmUnavailable(f"cannot build the initramfs: {e}")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Vm:
    """One VM: `links` is a list of (role, port) per NIC, role 'listen' or 'connect'; `host_id`
    (0-255) makes its NICs' MAC addresses unique among the VMs of a test."""

    def __init__(self, name, kernel, initramfs, job, links, workdir, host_id, memory_mb=768):
        self.name = name
        self.outbox = os.path.join(workdir, name)
        os.makedirs(self.outbox, exist_ok=True)
        qemu = shutil.which("qemu-system-x86_64")
        if not qemu:
            raise VmUnavailable("qemu-system-x86_64 is not installed")
        # TCG, not KVM: /dev/kvm exists on some of these machines, but nested guests there hang at boot.
        accel = ["-accel", "tcg", "-cpu", "max"]
        argv = [qemu, *accel, "-m", str(memory_mb), "-smp", "1", "-nographic", "-no-reboot",
                "-kernel", kernel, "-initrd", initramfs,
                "-append", f"console=ttyS0 quiet panic=-1 dc_job={job}",
                "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
                "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
                "-fsdev", f"local,id=outbox,path={self.outbox},security_model=none",
                "-device", "virtio-9p-pci,fsdev=outbox,mount_tag=outbox"]
        for i, (role, port) in enumerate(links):
            argv += ["-netdev", f"socket,id=n{i},{role}=127.0.0.1:{port}",
                     "-device", f"virtio-net-pci,netdev=n{i},mac=52:54:00:00:{host_id:02x}:{i:02x},romfile="]
        self.console = open(os.path.join(workdir, f"{name}.console"), "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.console, stderr=subprocess.STDOUT)

    def wait(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.console.close()
        rc_path = os.path.join(self.outbox, "job.rc")
        rc = int(open(rc_path).read().strip()) if os.path.exists(rc_path) else None
        return rc

    def log(self):
        path = os.path.join(self.outbox, "job.log")
        return open(path).read() if os.path.exists(path) else ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _prelude(modules_root, modules=()):
    # crc32_generic first: without it rdma_rxe fails to initialise on this kernel.
    wanted = ["crc32_generic", "rdma_rxe", "rdma_ucm", "ib_uverbs", *modules]
    return ["set -eu", "M=" + modules_root,
            f"for m in {' '.join(wanted)}; do modprobe -d \"$M\" $m; done",
            "ip link set lo up"]


def host_script(modules_root, addresses, body):
    """A VM job: loads Soft-RoCE, gives eth<i> the address addresses[i] (/24) with an rxe device on
    it (rxe<i>), then runs `body`."""
    lines = _prelude(modules_root)
    for i, address in enumerate(addresses):
        lines += [f"ip addr add {address}/24 dev eth{i}", f"ip link set eth{i} up",
                  f"rdma link add rxe{i} type rxe netdev eth{i}"]
    lines += ["rdma link", body]
    return "\n".join(lines) + "\n"


def bridge_script(modules_root, bridges, body):
    """A VM job for a host that is also the switch of its rails: bridge br<i> joins the NICs
    bridges[i][1] (eth numbers) and carries the address bridges[i][0] (/24) with an rxe device on it
    (rxe<i>), so the hosts behind those NICs reach this one and each other; then runs `body`."""
    lines = _prelude(modules_root, ["bridge"])
    for i, (address, nics) in enumerate(bridges):
        lines += [f"ip link add br{i} type bridge"]
        for n in nics:
            lines += [f"ip link set eth{n} master br{i}", f"ip link set eth{n} up"]
        lines += [f"ip addr add {address}/24 dev br{i}", f"ip link set br{i} up",
                  f"rdma link add rxe{i} type rxe netdev br{i}"]
    lines += ["rdma link", body]
    return "\n".join(lines) + "\n"
