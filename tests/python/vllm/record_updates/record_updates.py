"""A test-only vLLM plugin (on PYTHONPATH only where a test wants it): after each update through
the checkpoint-engine worker extension, the worker keeps vLLM's own per-parameter digests of its
model (the worker's compute_weight_checksums, as /weight_checker gives them), so a test can check every update of a
script that runs several in a row; `deltacast_test_history` (collective_rpc) returns them."""


def register():
    from deltacast.compat.worker import VllmColocateWorkerExtension

    if hasattr(VllmColocateWorkerExtension, "deltacast_test_history"):
        return
    update = VllmColocateWorkerExtension.deltacast_update

    def deltacast_update(self, handle, *args, **kwargs):
        result = update(self, handle, *args, **kwargs)
        if result is None:  # failed on this worker (the last worker raises it)
            return result
        self.__dict__.setdefault("_test_history", []).append(
            {"version": result["version"], "received_bytes": result["received_bytes"],
             "checksums": self.compute_weight_checksums()})
        return result

    def deltacast_test_history(self):
        return self.__dict__.get("_test_history", [])

    VllmColocateWorkerExtension.deltacast_update = deltacast_update
    VllmColocateWorkerExtension.deltacast_test_history = deltacast_test_history
