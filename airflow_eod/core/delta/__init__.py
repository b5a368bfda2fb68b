"""The Delta log: reading it, writing commits, checkpoints and their index, table compatibility."""
