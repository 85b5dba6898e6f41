"""Every event and command of Fairshare (docs/design.md section 3), as frozen pydantic models."""

# Each name is loaded on first use, from the imports of ``__init__.pyi`` (the one list, which
# type checkers read too): importing one model no longer builds all fifty (0.2 s), which a
# client of the API, reading a few of these types, paid on every command.
import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
