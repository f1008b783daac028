import os

# Tests spawn real pytest processes; keep BLAS pools small on a 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
