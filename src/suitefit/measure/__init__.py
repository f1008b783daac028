"""Measuring a pytest run's process tree without touching the processes that run tests.

``proctree`` reads /proc (the one boundary for process facts); ``watcher`` is the
sampler process (one per run, outside the test processes); ``sampler`` is the
session's handle on it; ``channel`` is the FIFO on which test processes say which
file they run; ``recorder`` turns pytest events into test rows and channel lines.
"""
