"""A discrete-event simulator that drives the scheduler core on a replayed trace."""
