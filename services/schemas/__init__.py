"""``fairshare schemas``: the command side of the JSON Schemas that ``events.schema_export``
derives from the models (``events`` itself stays free of command-line libraries)."""
