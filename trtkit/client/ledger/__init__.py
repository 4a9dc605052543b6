"""The usage ledger: one durable row per request on SQLite (default: TRTKIT_HOME/usage.db) or PostgreSQL,
the store's migrations, reports."""

from trtkit.client.ledger.migrations import MIGRATIONS, migrate
from trtkit.client.ledger.reports import GroupBy, ReportFormat, ReportRow, format_report, usage_report
from trtkit.client.ledger.store import (
    LEDGER_FILENAME,
    ROW_COLUMNS,
    Ledger,
    LedgerRow,
    default_ledger_path,
    open_ledger,
)

__all__ = ["MIGRATIONS", "migrate", "GroupBy", "ReportFormat", "ReportRow", "format_report", "usage_report",
           "LEDGER_FILENAME", "ROW_COLUMNS", "Ledger", "LedgerRow", "default_ledger_path", "open_ledger"]
