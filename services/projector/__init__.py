"""The projector: keeps the SQL read models (``services.read_models``) equal to the log,
storing its log position in the same transaction as the rows it writes."""
