"""Device identities, as checkpoint-engine pairs trainer ranks with the
inference workers on the same device: "GPU-<uuid>" on CUDA (what vLLM's
current_platform.get_device_uuid returns), "CPU-<host>-<local rank>" without;
and this host's address."""
import socket


def cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def device_count():
    """CUDA devices here (0 without torch or CUDA)."""
    if not cuda_available():
        return 0
    import torch
    return torch.cuda.device_count()


def device_uuid(local_rank):
    if cuda_available():
        import torch
        return f"GPU-{torch.cuda.get_device_properties(local_rank).uuid!s}"
    return cpu_device_uuid(local_rank)


def cpu_device_uuid(local_rank):
    """A device identity for a worker without a GPU (tests, CPU inference)."""
    return f"CPU-{socket.gethostname()}-{local_rank}"


def host_ip():
    """This host's address as other hosts reach it: the source address of its default route
    (a UDP socket connected to a public address picks it; nothing is sent), else the host name's
    address, as checkpoint-engine's get_ip does."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("8.8.8.8", 80))
            return s.getsockname()[0]
    except OSError:
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"
