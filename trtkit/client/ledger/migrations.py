"""The ledger's schema history is the store's one migration list (``trtkit.store.migrations``), shared
by SQLite and PostgreSQL; ledgers written before it (``_migrations``, m001..m003) migrate in place."""

from trtkit.store.migrations import MIGRATIONS, migrate

__all__ = ["MIGRATIONS", "migrate"]
