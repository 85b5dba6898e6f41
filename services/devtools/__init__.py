"""Development-only tools: demo data for tests and screenshots, and the screenshot script.

Nothing at runtime imports this package (an import-linter contract), and it is not shipped in
the wheel."""
