"""vllm.platforms.current_platform, as far as the worker extensions use it."""
import torch


class _Platform:
    device_type = "cuda" if torch.cuda.is_available() else "cpu"

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        # vLLM returns NVML's UUID, "GPU-<uuid>": the same string as torch's device uuid so prefixed.
        if not torch.cuda.is_available():
            raise NotImplementedError("the stand-in runs on CPU: no device UUID")
        return f"GPU-{torch.cuda.get_device_properties(device_id).uuid!s}"


current_platform = _Platform()
