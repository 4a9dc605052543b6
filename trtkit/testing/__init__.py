"""Helpers for tests that need real services, shipped for users' tests as well as trtkit's own and its
benchmarks (the library itself never imports them).

``trtkit.testing.postgres.ThrowawayPostgres``: a real PostgreSQL on loopback in a temp folder, to point a
gateway store (``open_gateway_store(pg.url)``) or a ledger (``open_ledger(pg.url)``) at; it needs the
distribution's ``postgresql`` package (``initdb``, ``pg_ctl``).
"""
