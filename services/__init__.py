"""What runs: the bus adapters, local brokers, the CLI and (later) the API, scheduler and agents."""
