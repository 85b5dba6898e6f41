"""Pure folds over the event log (usage windows, ledger, workload and cluster state) and their
hosts (faust agents, SQL read models). Filled in by the projections issue."""
