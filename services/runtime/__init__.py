"""What every long-running process shares: logging, signal handling, pausing the cyclic GC
around hot loops, and the command-line options that locate the bus."""
