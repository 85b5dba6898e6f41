"""``fairshare bench``: speed figures printed as JSON, each with a baseline measured in the same
run (benchmarks, never timed tests)."""
