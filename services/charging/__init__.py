"""The charging service: the pure ledger fold (``projections.ledger``) hosted over the bus port
(``host.py``), and the processes that wire it to Kafka: plain consumers, alone or as shards of a
group (``serve.py``), or a faust-streaming worker (``faust_serve.py``)."""
