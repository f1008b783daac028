"""Measuring a process tree from the inside of a pytest run.

``proctree`` reads /proc (the one boundary for process facts), ``sampler`` polls a
tree on a thread, ``recorder`` turns pytest events into history rows.
"""
