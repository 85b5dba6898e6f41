"""Our murmur2 equals Kafka's Java client (vectors from Kafka's own UtilsTest)."""

from __future__ import annotations

import pytest

from services.bus.partitioning import murmur2, partition_for_key


@pytest.mark.parametrize(
    ("key", "expected_signed"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(key: bytes, expected_signed: int) -> None:
    assert murmur2(key) == expected_signed & 0xFFFFFFFF


def test_partition_is_stable_and_in_range() -> None:
    for n in (1, 3, 7):
        for key in (b"wl-1", b"node-07", b"lab/vision"):
            partition = partition_for_key(key, n)
            assert 0 <= partition < n
            assert partition == partition_for_key(key, n)
    with pytest.raises(ValueError, match="partitions"):
        partition_for_key(b"x", 0)
