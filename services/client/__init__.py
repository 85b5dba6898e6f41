"""The command-line client of the Fairshare API (``fairshare submit``, ``queue``, ``why`` ...)."""

from services.client.api import ApiError, FairshareClient
from services.client.commands import client_app, register

__all__ = ["ApiError", "FairshareClient", "client_app", "register"]
