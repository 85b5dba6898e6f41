"""The language of Fairshare: envelopes, event models, topics, serde and schemas.

Everything here is pure (no I/O): every other part, and every auditor, speaks through it.
"""

# Loaded on first use, from the imports of ``__init__.pyi`` (see ``events/models``): a module
# that needs the topics' names does not build every event model.
import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
