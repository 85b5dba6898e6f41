"""The scheduler service: the pure core (``core/``) run over the live log by the one instance
that holds the lease (``lease.py``, ``service.py``)."""
