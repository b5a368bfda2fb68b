"""Commit records: the durable list of a batch's files, kept beside the plan log."""
