"""The HTTP API of Fairshare (FastAPI): reads the live state folded from the log, and turns
authorised, valid requests into events (never anything else).

Every name is loaded on first use, from the imports of ``__init__.pyi`` (lazy_loader): the CLI
client imports :mod:`services.api.models` (and so this package) to check the API's answers,
and must pay neither for FastAPI and Kafka nor for the tokens' budget tree and the events.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
