"""PostgreSQL's admission and settle: the steps of ``holds.py`` (and the key's slot of ``slots.py``) as two
server-side functions, so that a fleet pays one prepared call per admission and one per settle (``pg_prepared.py``),
whatever the hold holds: the key's concurrency slot, the rate windows of the key and of each level above it, every
budget.

A hold arrives as its reservation body (``holds.hold_body``: JSON, which its row keeps anyway): ``tokens``, ``cost``,
``budgets`` ([account, period_start, max_tokens, max_cost] each), ``rates`` ([subject, window_start, rpm, tpm] each;
a body made before migration 11 has one ``rate`` instead) and, for a key with a cap, ``slot`` ([key_id,
max_concurrent]). Lock order, as on SQLite and in the sweeper: the reservation row, the key's slot, the rate
windows, the budgets (both lists sorted by the client). The guard ``x / (CASE WHEN fits THEN 1 ELSE 0 END)`` fails
the whole call when any limit would be passed (``session.LimitReached``), so nothing is taken unless all is.

Migration 12 creates both (``migrations.py``); migration 6 made their first forms, and a database migrated by an
earlier build of migration 10 or 11 had other ones, which migration 12 replaces or drops.
"""

from __future__ import annotations

_SIGNATURE = "(TEXT, TEXT, DOUBLE PRECISION, DOUBLE PRECISION, TEXT)"

# The holds' rate windows: ``rates``, or the one ``rate`` of a body made before migration 11
_RATES = ("COALESCE(hold->'rates', CASE WHEN jsonb_typeof(hold->'rate') = 'array' THEN jsonb_build_array(hold->'rate') "
          "ELSE '[]'::JSONB END)")

RESERVE = """
    CREATE FUNCTION trtkit_reserve(p_id TEXT, p_owner TEXT, p_now DOUBLE PRECISION, p_expires DOUBLE PRECISION,
                                   p_body TEXT)
    RETURNS TABLE (out_requests BIGINT, out_tokens BIGINT)
    LANGUAGE plpgsql AS $fn$
    DECLARE
        hold JSONB := p_body::JSONB;
        need_tokens BIGINT := (hold->>'tokens')::BIGINT;
        need_cost DOUBLE PRECISION := (hold->>'cost')::DOUBLE PRECISION;
        slot JSONB := hold->'slot';
        rate JSONB;
        budget JSONB;
    BEGIN
        IF jsonb_typeof(slot) = 'array' THEN
            INSERT INTO key_slots AS k (key_id, in_flight) VALUES (slot->>0, 1)
            ON CONFLICT (key_id) DO UPDATE SET
                in_flight = k.in_flight + 1 / (CASE WHEN k.in_flight + 1 <= (slot->>1)::BIGINT THEN 1 ELSE 0 END);
        END IF;
        FOR rate IN SELECT value FROM jsonb_array_elements(""" + _RATES + """) LOOP
            INSERT INTO rate_windows AS w (key_id, window_start, requests, tokens)
            VALUES (rate->>0, (rate->>1)::BIGINT, 1, need_tokens)
            ON CONFLICT (key_id, window_start) DO UPDATE SET
                requests = w.requests + 1 / (CASE WHEN (rate->>2 IS NULL OR w.requests + 1 <= (rate->>2)::BIGINT)
                    AND (rate->>3 IS NULL OR w.tokens + excluded.tokens <= (rate->>3)::BIGINT) THEN 1 ELSE 0 END),
                tokens = w.tokens + excluded.tokens
            RETURNING w.requests, w.tokens INTO out_requests, out_tokens;
            RETURN NEXT;
        END LOOP;
        FOR budget IN SELECT value FROM jsonb_array_elements(hold->'budgets') LOOP
            INSERT INTO budget_accounts AS b (account, period_start, max_tokens, max_cost, reserved_tokens,
                                              reserved_cost)
            VALUES (budget->>0, (budget->>1)::DOUBLE PRECISION, (budget->>2)::BIGINT,
                    (budget->>3)::DOUBLE PRECISION, need_tokens, need_cost)
            ON CONFLICT (account, period_start) DO UPDATE SET
                reserved_tokens = b.reserved_tokens + excluded.reserved_tokens / (CASE WHEN
                    (excluded.max_tokens IS NULL
                     OR b.used_tokens + b.reserved_tokens + excluded.reserved_tokens <= excluded.max_tokens)
                    AND (excluded.max_cost IS NULL
                     OR b.used_cost + b.reserved_cost + excluded.reserved_cost <= excluded.max_cost)
                    THEN 1 ELSE 0 END),
                reserved_cost = b.reserved_cost + excluded.reserved_cost,
                max_tokens = excluded.max_tokens, max_cost = excluded.max_cost;
        END LOOP;
        INSERT INTO reservations (id, owner, created_at, expires_at, body)
        VALUES (p_id, p_owner, p_now, p_expires, p_body);
    END
    $fn$"""

# What a hold gave back only while its reservation row exists (locked first): a slot, a hold, given back once.
SETTLE = """
    CREATE OR REPLACE FUNCTION trtkit_settle(p_id TEXT, p_body TEXT, p_used_tokens BIGINT,
                                             p_used_cost DOUBLE PRECISION) RETURNS INTEGER
    LANGUAGE plpgsql AS $fn$
    DECLARE
        hold JSONB := p_body::JSONB;
        back_tokens BIGINT := 0;
        back_cost DOUBLE PRECISION := 0;
        rate JSONB;
        budget JSONB;
        deleted INTEGER;
    BEGIN
        PERFORM 1 FROM reservations WHERE id = p_id FOR UPDATE;
        IF FOUND THEN
            back_tokens := (hold->>'tokens')::BIGINT;
            back_cost := (hold->>'cost')::DOUBLE PRECISION;
            IF jsonb_typeof(hold->'slot') = 'array' THEN
                UPDATE key_slots SET in_flight = in_flight - 1 WHERE key_id = hold->'slot'->>0;
            END IF;
        END IF;
        FOR rate IN SELECT value FROM jsonb_array_elements(""" + _RATES + """) LOOP
            UPDATE rate_windows SET tokens = tokens - back_tokens + p_used_tokens
            WHERE key_id = rate->>0 AND window_start = (rate->>1)::BIGINT;
        END LOOP;
        FOR budget IN SELECT value FROM jsonb_array_elements(hold->'budgets') LOOP
            UPDATE budget_accounts SET reserved_tokens = reserved_tokens - back_tokens,
                reserved_cost = reserved_cost - back_cost, used_tokens = used_tokens + p_used_tokens,
                used_cost = used_cost + p_used_cost
            WHERE account = budget->>0 AND period_start = (budget->>1)::DOUBLE PRECISION;
        END LOOP;
        DELETE FROM reservations WHERE id = p_id;
        GET DIAGNOSTICS deleted = ROW_COUNT;
        RETURN deleted;
    END
    $fn$"""

# Migration 12: the functions above, in place of whichever came before. trtkit_reserve changes its result (one row
# per rate window), so it is dropped and made anew; the wrappers of an earlier migration 10 are dropped.
MIGRATION_STATEMENTS = (
    f"DROP FUNCTION IF EXISTS trtkit_reserve_slot{_SIGNATURE}",
    "DROP FUNCTION IF EXISTS trtkit_settle_slot(TEXT, TEXT, BIGINT, DOUBLE PRECISION)",
    f"DROP FUNCTION IF EXISTS trtkit_reserve{_SIGNATURE}",
    RESERVE,
    SETTLE,
)
