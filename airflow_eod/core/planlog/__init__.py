"""The plan log: plans, claims, offsets, intervals, restatement chains and retention."""
