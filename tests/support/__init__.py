"""Helpers shared by the test suites: builders, the local cluster and kubectl."""
