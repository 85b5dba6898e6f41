"""An export file's vouching records (``EventFile.vouching``): the key facts and node
registrations an audit reads before its first record, found by searching the file's bytes
for their types' names: every one of them, in the file's order, and nothing that only names
such a type further on in its line."""

from __future__ import annotations

from pathlib import Path

from events.models import NodeRegistered, WorkloadSubmitted
from events.serde import encode_structured
from services.audit.sources import EventFile
from tests.signing import KEYS, fact, registration


def test_the_vouching_records_are_found_in_the_files_order_and_only_they(tmp_path: Path) -> None:
    node = NodeRegistered(node="n1", cluster="c", pool="p", gpus=8, gpu_type="t")
    named_further_on = WorkloadSubmitted(
        workload_id="wl-1",
        budget="lab/a",
        pools=("p",),
        gpus=1,
        min_runtime_s=60,
        submitter="u",
        spec={"type": "fairshare.node.registered.v1"},
    )
    records = [
        fact(named_further_on, 5),
        registration(KEYS.admin, "admin", None, 9),
        fact(node, 3, KEYS.agent_a),
        registration(KEYS.agent_a, "agent", "c", 1),
    ]
    lines = [encode_structured(e) for e in records]
    assert b'"type":"fairshare.node.registered.v1"' in lines[0]
    bad = lines[2].replace(b'"gpus":8', b'"gpus":"8"')  # a registration that does not decode
    path = tmp_path / "log.ndjson"
    path.write_bytes(b"\n".join([lines[0], lines[1], b"", lines[2], bad, lines[3]]))  # no last \n
    assert list(EventFile(path).vouching()) == [records[1], records[2], records[3]]


def test_an_empty_file_vouches_for_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.ndjson"
    path.write_bytes(b"")
    assert list(EventFile(path).vouching()) == []
