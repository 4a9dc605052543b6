"""Outputs of a run: files (JSONL, CSV, JSON), plots (matplotlib PNGs), the HTML report, the console table.

They read a finished ``RunData``; none of them knows how the load was generated.
"""
