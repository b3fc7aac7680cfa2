"""The development launcher: a whole federation of separate processes on one machine (mpdp federation up, tests, benchmarks)."""
