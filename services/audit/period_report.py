"""The figures of ``fairshare audit replay --period``: the seal's balances, the charges on
both sides, what was read and how long it took, and every difference."""

from __future__ import annotations

from services.audit.period import PeriodAudit


def report_lines(result: PeriodAudit) -> list[str]:
    lines = list(result.differences)
    sealed = result.seal
    if sealed is not None:
        opening = {b.account: b.amount for b in sealed.opening}
        span = f"{sealed.start:%Y-%m-%d %H:%M} to {sealed.end:%Y-%m-%d %H:%M} UTC"
        lines.append(f"period {sealed.period}: {span}")
        for balance in sealed.closing:
            moved = balance.amount - opening.get(balance.account, 0)
            lines.append(
                f"  {balance.account}: opens at {opening.get(balance.account, 0)}, "
                f"closes at {balance.amount} ({moved:+d})"
            )
        chained = f"chained to {result.previous.period}" if result.previous else "first seal"
        lines.append(f"  seal {sealed.digest[:16]}..., {chained}")
    where = (
        "from the checkpoint where it opened"
        if result.from_checkpoint
        else "from the first offset: no usable checkpoint"
    )
    lines.append(
        f"{result.recorded} charges held by the seal ({result.late} late, for earlier hours), "
        f"{result.recomputed} recomputed from {result.facts} facts "
        f"({where}), "
        f"{result.ledger_records} ledger records read, {result.seconds:.2f} s"
    )
    lines.append("identical" if result.identical else f"{len(result.differences)} difference(s)")
    return lines
