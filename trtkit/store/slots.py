"""A key's requests in flight, capped in the store: exact across replicas, as budgets are.

One tenant must not hold the whole gateway (150 never-read streams of one key queued in Triton, and another key's
request timed out behind them). Each admitted request of a key with a cap takes one of its slots (``key_slots``:
one row per key, ``in_flight``) in the same transaction as its budgets and rate windows, with the same guard: the
count moves only if ``in_flight + 1 <= max_concurrent``, decided by the database, so concurrent admissions on any
number of replicas never pass it. Settling the hold gives the slot back (only while its reservation row exists,
as budgets are), and so does the sweeper that frees an expired hold.

SQLite runs the statements below inside admission's one flight. On PostgreSQL the slot is taken and given back by
the same two functions as every other hold (``pg_admission.py``: ``trtkit_reserve`` / ``trtkit_settle``), so an
admission is still one prepared call and a settle one more. Lock order (reservation row, key slot, rate windows,
budgets) is the same in admission, settle and the sweeper.
"""

from __future__ import annotations

from trtkit.store.records import Hold, SlotLimit
from trtkit.store.session import Session, Statement

_HELD = "CASE WHEN EXISTS (SELECT 1 FROM reservations WHERE id = ?) THEN 1 ELSE 0 END"


def take(slot: SlotLimit) -> Statement:
    """SQLite: one slot of the key, or the guard fails the admission (``session.LimitReached``)."""
    return ("INSERT INTO key_slots (key_id, in_flight) VALUES (?, 1) ON CONFLICT (key_id) DO UPDATE SET "
            "in_flight = key_slots.in_flight + 1 / (CASE WHEN key_slots.in_flight + 1 <= ? THEN 1 ELSE 0 END)",
            (slot.key_id, slot.max_concurrent))


def give_back(hold: Hold) -> Statement:
    """SQLite: the hold's slot back, while its reservation row is still there (run before the row is deleted)."""
    assert hold.slot is not None
    return (f"UPDATE key_slots SET in_flight = in_flight - {_HELD} WHERE key_id = ?", (hold.id, hold.slot.key_id))


def give_back_expired(session: Session, slots: dict[str, int]) -> None:
    """The slots of holds the sweeper freed (key id -> how many), in lock order."""
    for key_id, count in sorted(slots.items()):
        session.execute("UPDATE key_slots SET in_flight = in_flight - ? WHERE key_id = ?", (count, key_id))


def in_flight(session: Session, slot: SlotLimit) -> int:
    row = session.execute("SELECT in_flight FROM key_slots WHERE key_id = ?", (slot.key_id,)).fetchone()
    return int(row[0]) if row else 0


def slot_of(body: dict) -> SlotLimit | None:
    """The slot recorded in a reservation row's body (``holds.hold_body``), if any."""
    slot = body.get("slot")
    return None if not slot else SlotLimit(str(slot[0]), int(slot[1]))
