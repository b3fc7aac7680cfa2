"""Operator clients, one file per protocol: submit jobs, watch them, fetch and use releases."""
