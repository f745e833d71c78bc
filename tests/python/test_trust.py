"""The group's secret in every form token= takes, the protection modes (encrypt=, insecure=),
and what is refused: a wrong secret, less protection than the other side requires, a secret
that cannot be one. Producers and consumers talk over real sockets in this process."""
import os

import pytest
import torch

import deltacast
from conftest import raw_bytes

SECRET = bytes(range(32))


def weights(seed=0):
    torch.manual_seed(seed)
    return {"w": torch.randn(256, 64).to(torch.bfloat16), "b": torch.randn(64)}


def sync_once(producer_kwargs, consumer_kwargs):
    """A full version and a delta from a producer to one consumer; the consumer's tensors after each."""
    trained = weights(1)
    held = {n: torch.zeros_like(t) for n, t in trained.items()}
    with deltacast.Producer(trained, **producer_kwargs) as producer:
        with deltacast.Consumer(held, connect=producer.address, join_timeout=20, **consumer_kwargs) as consumer:
            for step in range(2):
                with torch.no_grad():
                    trained["w"][3, :7 + step] += 1
                version = producer.publish()
                assert consumer.pull(timeout=30) == version
                assert all(raw_bytes(held[n]) == raw_bytes(trained[n]) for n in trained), f"step {step}"


@pytest.mark.parametrize("mode", ["authenticated", "encrypted", "insecure"])
def test_every_mode_syncs_exactly(mode):
    kwargs = {"token": SECRET, "encrypt": mode == "encrypted", "insecure": mode == "insecure"}
    sync_once(kwargs, kwargs)


def test_one_side_encrypting_makes_the_session_encrypted_not_refused():
    sync_once({"token": SECRET}, {"token": SECRET, "encrypt": True})


def test_the_secret_in_every_form_is_the_same_secret(tmp_path):
    raw = tmp_path / "secret.bin"
    raw.write_bytes(SECRET)
    hexed = tmp_path / "secret.hex"
    hexed.write_text(SECRET.hex() + "\n")
    os.environ["DELTACAST_TEST_TRUST_SECRET"] = "hex:" + SECRET.hex()
    try:
        for form in (raw, "file:" + str(hexed), "hex:" + SECRET.hex(), "env:DELTACAST_TEST_TRUST_SECRET"):
            sync_once({"token": SECRET}, {"token": form})
    finally:
        del os.environ["DELTACAST_TEST_TRUST_SECRET"]
    sync_once({"token": "a long passphrase"}, {"token": "pass:a long passphrase"})
    # The legacy integer token, as an int and as the text a worker is sent (deltacast-bench's form too).
    sync_once({"token": 12345}, {"token": "legacy:12345"})


def test_a_wrong_secret_and_a_downgrade_are_refused_naming_why():
    with deltacast.Producer(weights(), token=SECRET) as producer:
        with pytest.raises(deltacast.TokenError, match="wrong secret"):
            deltacast.Consumer(weights(), connect=producer.address, token=bytes(32), join_timeout=10)
        with pytest.raises(deltacast.TokenError, match="offers authenticated; this side requires insecure"):
            deltacast.Consumer(weights(), connect=producer.address, token=SECRET, insecure=True, join_timeout=10)
        with pytest.raises(deltacast.TokenError, match="wrong secret"):
            deltacast.Consumer(weights(), connect=producer.address, token="guess", join_timeout=10)


def test_secrets_that_cannot_be_one_are_refused_saying_why(tmp_path):
    with pytest.raises(deltacast.InvalidArgumentError, match="31 bytes given"):
        deltacast.Producer(weights(), token=bytes(31))
    with pytest.raises(deltacast.InvalidArgumentError, match="choose one"):
        deltacast.Producer(weights(), token=SECRET, encrypt=True, insecure=True)
    with pytest.raises(deltacast.InvalidArgumentError, match="hex digits"):
        deltacast.Producer(weights(), token="hex:abcd")
    with pytest.raises(deltacast.InvalidArgumentError, match="cannot read the file"):
        deltacast.Producer(weights(), token=tmp_path / "missing")
    with pytest.raises(deltacast.InvalidArgumentError, match="passphrase is empty"):
        deltacast.Producer(weights(), token="")
