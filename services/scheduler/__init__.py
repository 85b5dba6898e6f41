"""The scheduler: a pure, deterministic policy core (this package, no I/O and no clock), wrapped
by the scheduler service (Kafka) and the simulator (a discrete-event clock)."""
