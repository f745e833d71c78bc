"""A stand-in for the parts of vLLM (0.10.2 - 0.11) that deltacast's worker
extension touches, with vLLM's names and signatures, for tests on machines
without vLLM (it needs a GPU). The worker extension imports exactly these;
on a real vLLM it imports vLLM's."""
