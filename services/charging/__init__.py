"""The charging service: hosts of the pure ledger fold (``projections.ledger``) over the bus,
as a plain consumer (``host.py``) or a faust-streaming worker (``faust_host.py``)."""
