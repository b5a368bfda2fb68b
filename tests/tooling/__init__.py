"""Tests of the repository's own machinery: the wheel and sdist, docker-compose.yaml, the
benchmark smoke run, the test servers' reaper and the cluster harness."""
