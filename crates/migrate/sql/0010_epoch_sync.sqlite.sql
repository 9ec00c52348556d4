-- epoch sync: the store's identity and its cursors per sending store
--
-- Revision 0010 of cairn's own migration set, SQLite dialect; 0010_epoch_sync.postgres.sql
-- creates the same objects with the same meaning. Only new tables: builds at 0009 and older
-- keep working on a store at 0010 (they neither read nor write them).
--
-- epoch_sync_self: this store's sync identity (cairn_core::sync::StoreId, 32 lowercase hex
-- digits), one row (one = 1) written by the first EpochStore::store_id call of any process
-- (INSERT ... ON CONFLICT DO NOTHING, then read back, so concurrent first calls agree).
-- epoch_sync_peer: the cursor this store keeps per sending store (peer: its StoreId) and space
-- (cairn_core::sync::SyncPeer): every epoch the sender holds at or below its seq is here, and
-- id is the sender's epoch at seq (32 bytes); epochs and bytes count what this store imported
-- from the peer in the space (stored bytes of their events); updated_at_us is when the cursor
-- last moved (microseconds since the Unix epoch, the syncing process's clock).
-- This text is hashed into the revision's checksum: never edit it once committed.
CREATE TABLE epoch_sync_self (
    one INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    store_id TEXT NOT NULL
);

CREATE TABLE epoch_sync_peer (
    space BLOB NOT NULL,
    peer TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id BLOB NOT NULL,
    epochs INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    updated_at_us INTEGER NOT NULL,
    PRIMARY KEY (space, peer)
);
