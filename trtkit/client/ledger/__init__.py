"""The usage ledger: SQLite under TRTKIT_HOME, one durable row per request, numbered migrations, reports."""

from trtkit.client.ledger.migrations import MIGRATIONS, migrate
from trtkit.client.ledger.reports import GroupBy, ReportFormat, ReportRow, format_report, usage_report
from trtkit.client.ledger.store import LEDGER_FILENAME, ROW_COLUMNS, Ledger, LedgerRow, default_ledger_path

__all__ = ["MIGRATIONS", "migrate", "GroupBy", "ReportFormat", "ReportRow", "format_report", "usage_report",
           "LEDGER_FILENAME", "ROW_COLUMNS", "Ledger", "LedgerRow", "default_ledger_path"]
