"""The pure scheduling core: hierarchical fair-share order, gang placement, victim choice, one
pass with its decision records, the baselines, and the explanations built on them.

Pure and deterministic on purpose: no I/O, no clock (``now`` is an argument), sorted iteration,
so the live scheduler, the simulator and an auditor's replay reach the same decisions from the
same facts. It imports only ``events`` and ``projections`` (an import-linter contract)."""
