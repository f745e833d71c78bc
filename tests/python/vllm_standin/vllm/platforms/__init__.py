"""vllm.platforms.current_platform, as far as the extension uses it."""


class _Platform:
    device_type = "cpu"

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        raise NotImplementedError("the stand-in runs on CPU: no device UUID")


current_platform = _Platform()
