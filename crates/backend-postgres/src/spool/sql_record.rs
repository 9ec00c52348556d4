//! The claim statements of the layout before the contract revision `0008_spool_ready_contract`
//! (`spool::layout`): the previous release's [`CLAIM_QUEUED_RECORD`] and [`CLAIM_PICK_RECORD`]
//! through `spool_run`'s own claim indexes, [`NEXT_DUE_RECORD`], and [`READY_LAYOUT`], which
//! tells when to stop using them. The conventions are `super::sql`'s.

use super::sql::claim_backoff_joins;

/// [`super::sql::CLAIM_QUEUED`] through `spool_run`'s own claim indexes, as builds before revision
/// `0007_spool_ready` claim: what this build runs until it has read that the store holds the
/// contract revision `0008_spool_ready_contract` (`spool::layout`). Same parameters and rows.
/// It writes the claimed runs' `spool_ready` rows as [`super::sql::CLAIM_QUEUED`] does: a spool still on
/// this path after another process applied 0008 (for up to `layout::RECHECK`) keeps I-ready,
/// on which the spools that switched rely (before 0008 the write finds only the rows of runs
/// this build enqueued, and 0008 rebuilds the table anyway). [`CLAIM_PICK_RECORD`]'s writes go
/// through [`super::sql::CLAIM_APPLY`], which keeps the rows too.
pub(super) const CLAIM_QUEUED_RECORD: &str = concat!(
    "WITH p AS ( \
        SELECT $6::int8 AS expires_at, $7::numeric AS base_ns, $8::numeric AS cap_ns \
    ), late AS ( \
        SELECT 1 FROM spool_run r \
        WHERE r.queue = $1 AND r.state = 'claimed' AND r.due_at <= $2 LIMIT 1 \
    ), c AS ( \
        SELECT r.run_no, r.priority, r.due_at, r.attempts, r.claim_attempt, r.claim_jitter \
        FROM spool_run r \
        WHERE r.queue = $1 AND r.due_at IS NOT NULL AND r.due_at <= $2 AND r.state = 'queued' \
        ORDER BY r.priority DESC, r.due_at, r.run_no \
        LIMIT $3 \
        FOR NO KEY UPDATE SKIP LOCKED \
    ), go AS ( \
        SELECT NOT EXISTS (SELECT 1 FROM late) AND NOT EXISTS ( \
            SELECT 1 FROM c WHERE c.claim_attempt IS NULL OR c.claim_jitter IS NULL \
                OR c.claim_attempt::int8 <> c.attempts::int8 + 1 \
                OR c.claim_jitter < 0 OR c.claim_jitter > 4294967295) AS ok \
    ), n AS ( \
        SELECT c.run_no, c.attempts::int8 + 1 AS attempt, c.claim_jitter AS jitter, \
            pg_catalog.row_number() OVER (ORDER BY c.priority DESC, c.due_at, c.run_no) AS i \
        FROM c, go WHERE go.ok \
    ), w AS ( \
        SELECT n.run_no, n.attempt, n.i, d.due_at FROM n CROSS JOIN p ",
    claim_backoff_joins!(),
    " ), u AS ( \
        UPDATE spool_run r SET state = 'claimed', attempts = w.attempt, \
            lease_token = ($4::bytea[])[w.i], lease_consumer = $5, \
            lease_expires_at = p.expires_at, due_at = w.due_at, finished_at = NULL, \
            updated_at = $2 \
        FROM w, p WHERE r.run_no = w.run_no \
            AND r.run_no = ANY (ARRAY(SELECT w2.run_no FROM w w2)) \
        RETURNING w.i, r.run_id, r.dedup_key, r.payload, r.attempts \
    ), rq AS ( \
        UPDATE spool_ready q SET due_at = w.due_at, claimed = TRUE \
        FROM w WHERE q.run_no = w.run_no \
            AND q.run_no = ANY (ARRAY(SELECT w2.run_no FROM w w2)) \
    ) \
    SELECT go.ok, u.i, u.run_id, u.dedup_key, u.payload, u.attempts \
    FROM go LEFT JOIN u ON TRUE ORDER BY u.i"
);
/// [`super::sql::CLAIM_PICK`] through `spool_run`'s own claim indexes (see [`CLAIM_QUEUED_RECORD`]). Same
/// parameters and rows.
pub(super) const CLAIM_PICK_RECORD: &str = "\
WITH e AS ( \
    SELECT r.run_id, r.state, r.attempts, r.max_attempts, r.cancel_requested \
    FROM spool_run r \
    WHERE r.queue = $1 AND r.state = 'claimed' AND r.due_at <= $2 \
    FOR NO KEY UPDATE SKIP LOCKED \
), c AS ( \
    SELECT r.run_id, r.state, r.attempts, r.max_attempts, r.cancel_requested, r.dedup_key, \
        r.payload, r.priority, r.due_at, r.run_no \
    FROM spool_run r \
    WHERE r.queue = $1 AND r.due_at IS NOT NULL AND r.due_at <= $2 \
        AND NOT (r.state = 'claimed' AND (r.cancel_requested OR r.attempts >= r.max_attempts)) \
    ORDER BY r.priority DESC, r.due_at, r.run_no \
    LIMIT $3 \
    FOR NO KEY UPDATE SKIP LOCKED \
) \
SELECT * FROM ( \
    SELECT 'e' AS kind, run_id, state, attempts, max_attempts, cancel_requested, \
        NULL::bytea AS dedup_key, NULL::bytea AS payload, 0 AS priority, 0::bigint AS due_at, \
        0::bigint AS run_no \
    FROM e \
    UNION ALL \
    SELECT 'c', run_id, state, attempts, max_attempts, cancel_requested, dedup_key, payload, \
        priority, due_at, run_no \
    FROM c \
) picked \
ORDER BY kind DESC, priority DESC, due_at, run_no";

/// Whether the store holds the contract revision `0008_spool_ready_contract`, from which on
/// claims find runs through `spool_ready` (`spool::layout`).
pub(super) const READY_LAYOUT: &str = "\
SELECT EXISTS (SELECT 1 FROM cairn_contract \
    WHERE set_name = 'cairn' AND revision = '0008_spool_ready_contract')";

/// [`super::sql::NEXT_DUE`] through `spool_run` (see [`CLAIM_QUEUED_RECORD`]).
pub(super) const NEXT_DUE_RECORD: &str =
    "SELECT pg_catalog.min(due_at) FROM spool_run WHERE queue = $1 AND due_at IS NOT NULL";
