"""The audit: replay the log into a fresh ledger and compare, check invariants, explain."""
