"""Processes that tests start and leave running: counted like a fixture that lives with its worker.

A test that uses joblib's ``n_jobs`` (scikit-learn, and anything on joblib) starts loky's
reusable pool, which stays in the worker's tree for the rest of the worker's life, and the
next test with ``n_jobs`` on that worker uses it again. No fixture set it up, so before this
the memory was one file's "kept" memory, on the one worker where the profile happened to
start it: a plan from a serial profile of scikit-learn predicted 1000 MiB for a 2-worker run
that peaked at 1.36 GiB, both workers having started a pool of their own.

The recorder names the files that started such processes or ran them (their CPU time grew
while the file ran) as the users of one pseudo-fixture per worker; the cost model and the
core count it as resident from its first user on a worker to the worker's end. It is never
released (no teardown of ours could end it) nor grouped by (its users are usually many).
"""

from __future__ import annotations

NAME = "(processes tests left running)"
SCOPE = "worker"  # lives as long as its worker: no pytest scope ends it
