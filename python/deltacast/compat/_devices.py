"""Device identities, as checkpoint-engine pairs trainer ranks with the
inference workers on the same device: "GPU-<uuid>" on CUDA (what vLLM's
current_platform.get_device_uuid returns), "CPU-<host>-<local rank>" without."""
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
    """This host's address as other hosts reach it (the host name's address; loopback when it
    resolves to nothing better)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
