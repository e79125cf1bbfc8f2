"""Fuzzing the wire format: any byte string decodes or raises SummaryFormatError."""

import numpy as np
import pytest

from skslot import GaussianSummary, SummaryFormatError

from .conftest import random_spd


def decode_or_documented_error(payload: bytes) -> GaussianSummary | None:
    try:
        return GaussianSummary.from_bytes(payload)
    except SummaryFormatError:
        return None


@pytest.fixture(scope="module")
def valid_payloads():
    rng = np.random.default_rng(1)
    out = []
    for m, dtype, client in [(1, "float64", None), (3, "float32", 5), (6, "float16", "site")]:
        s = GaussianSummary(
            int(rng.integers(2, 1000)),
            rng.normal(size=m),
            random_spd(rng, m, 10.0),
            shrinkage=0.3,
            client=client,
        )
        out.append(s.to_bytes(dtype=dtype))
    return out


def test_random_bytes_never_crash():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        size = int(rng.integers(0, 200))
        payload = rng.integers(0, 256, size=size, dtype=np.uint8).tobytes()
        if rng.random() < 0.5:  # a valid magic and version, so parsing goes deeper
            payload = b"SKSG\x01" + payload[5:]
        decode_or_documented_error(payload)


def test_mutated_payloads_never_crash_and_decoded_ones_are_valid(valid_payloads):
    rng = np.random.default_rng(2)
    decoded = 0
    for _ in range(3000):
        payload = bytearray(valid_payloads[int(rng.integers(len(valid_payloads)))])
        action = rng.integers(4)
        if action == 0:  # flip bytes
            for i in rng.integers(0, len(payload), size=int(rng.integers(1, 4))):
                payload[i] = int(rng.integers(256))
        elif action == 1:  # truncate
            payload = payload[: int(rng.integers(len(payload)))]
        elif action == 2:  # extend
            payload += rng.integers(0, 256, size=int(rng.integers(1, 16)), dtype=np.uint8).tobytes()
        else:  # overwrite a header field with an extreme value
            i = int(rng.integers(4, 28))
            payload[i : i + 4] = b"\xff\xff\xff\x7f"
        result = decode_or_documented_error(bytes(payload))
        if result is not None:
            decoded += 1
            assert np.all(np.isfinite(result.mean)) and np.all(np.isfinite(result.covariance))
            assert np.linalg.eigvalsh(result.covariance).min() > 0
            assert result.n >= 2
    assert decoded > 0  # some byte flips land in values and still decode


def test_npy_header_fuzz_raises_only_the_message_format_error():
    """Any mutation of an array's .npy bytes decodes, or raises MessageFormatError, nothing else."""
    pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")
    import io

    from flwr.app import Array, ArrayRecord

    from skslot.wire import MessageFormatError

    from .flower_harness import record_arrays

    rng = np.random.default_rng(7)
    buffer = io.BytesIO()
    np.save(buffer, np.arange(12, dtype=np.int64).reshape(3, 4))
    valid = buffer.getvalue()
    header_end = valid.index(b"\n") + 1
    tokens = [
        b"True",
        b"-1",
        b"1.5",
        b"2**64",
        b"18446744073709551616",
        b"()",
        b"None",
        b"'|O'",
        b"'<V8'",
        b"'<U3'",
        b"[",
        b"{",
        b"9" * 30,
        b"\x00",
        b"\xff",
    ]
    outcomes = {"decoded": 0, "rejected": 0}
    for trial in range(3000):
        data = bytearray(valid)
        if trial % 3 == 0:  # a token pasted into the header
            at = int(rng.integers(10, header_end - 1))
            token = tokens[int(rng.integers(len(tokens)))]
            data[at : at + len(token)] = token
        elif trial % 3 == 1:  # random bytes flipped anywhere
            for at in rng.integers(0, len(data), size=int(rng.integers(1, 6))):
                data[at] = int(rng.integers(256))
        else:  # truncated or extended
            cut = int(rng.integers(0, len(data) + 32))
            data = data[:cut] + bytes(max(0, cut - len(data)))
        record = ArrayRecord(
            {"x": Array(dtype="int64", shape=(3, 4), stype="numpy.ndarray", data=bytes(data))}
        )
        try:
            record_arrays(record, max_bytes=1 << 20)
            outcomes["decoded"] += 1
        except MessageFormatError:
            outcomes["rejected"] += 1
    assert outcomes["rejected"] > 1000 and outcomes["decoded"] > 0, outcomes
