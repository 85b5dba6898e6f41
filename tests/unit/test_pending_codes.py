"""The codes of why pending work waits are declared once (``scheduling.pending_codes``): every
reason of the core carries one, every code has exactly one model among the API's answers, typed
from the enum, and the answers' schema lists them all."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import TypeAdapter

from scheduling import why_pending as why
from scheduling.pending_codes import PendingCode
from services.api import models as m

#: The models of ``m.Reason`` (an ``Annotated`` union told apart by ``code``).
REASON_MODELS: tuple[type[Any], ...] = get_args(get_args(m.Reason)[0])


def test_every_reason_of_the_core_carries_its_own_code() -> None:
    codes = [reason.code for reason in get_args(why.PendingReason)]
    assert sorted(codes) == sorted(PendingCode)


def test_every_code_has_one_answer_model_typed_from_the_enum() -> None:
    owners: dict[PendingCode, str] = {}
    for model in REASON_MODELS:
        for code in get_args(model.model_fields["code"].annotation):
            assert isinstance(code, PendingCode), (model.__name__, code)
            assert code not in owners, (code, owners[code], model.__name__)
            owners[code] = model.__name__
    assert set(owners) == set(PendingCode)


def test_the_answers_schema_lists_every_code() -> None:
    schema = TypeAdapter(m.Reason).json_schema(mode="serialization")
    assert set(schema["discriminator"]["mapping"]) == {code.value for code in PendingCode}


def test_a_code_read_back_by_a_client_is_the_enum() -> None:
    reason = TypeAdapter(m.Reason).validate_json('{"code": "no-nodes", "message": "none"}')
    assert isinstance(reason, m.PlainReason)
    assert reason.code is PendingCode.NO_NODES
    assert f"[{reason.code}]" == "[no-nodes]"
