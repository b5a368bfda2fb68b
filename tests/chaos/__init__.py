"""The chaos harness: generated histories, injected faults and an independent checker.

See docs/testing.md. ``world`` holds the sources and what each file held, ``oracle`` compares
the table with them row by row, ``machine`` is the Hypothesis state machine that invents
the histories, ``attempt`` the child process a SIGKILL hits, ``report`` the counters.
``test_chaos`` runs the tier; ``test_chaos_checker`` shows that the checker can fail.
"""
