"""`trtkit serve --stop`: stop servers recorded under TRTKIT_HOME by another process."""

from __future__ import annotations

import logging

from trtkit.serve.processes import clean_leftovers, stop_process_group
from trtkit.serve.state import ServerRecord, read_records, remove_record

logger = logging.getLogger(__name__)


def stop_recorded_servers(grace_s: float = 15.0) -> list[ServerRecord]:
    """Stop every recorded server still running; clean up after those that died. Returns the stopped ones."""
    stopped = []
    for record in read_records():
        if record.is_running():
            stop_process_group(record.pid, record.shm_prefix, grace_s)
            stopped.append(record)
        else:
            # crashed or killed by hand: its stubs and shm regions may still be around
            clean_leftovers(record.shm_prefix, wait_s=0.0)
        remove_record(record.pid)
    return stopped
