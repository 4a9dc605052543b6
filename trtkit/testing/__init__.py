"""Helpers for tests and benchmarks that need real services (not imported by the library itself)."""
