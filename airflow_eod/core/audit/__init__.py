"""The audit: ``verify``, the facts it reads from the log, and a batch's status."""
