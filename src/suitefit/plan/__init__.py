"""The planner: PURE (plain data in, plain data out; no processes, files or pytest)."""
