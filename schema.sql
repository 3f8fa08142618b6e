-- agentstate schema: the single source of every table and index.
--
-- The file is a list of numbered migrations. A line `-- migration: <table> <v>`
-- starts migration <v> of the series recorded in <table>; the statements up to
-- the next marker run in one transaction, followed by
-- `INSERT INTO <table> (v) VALUES (<v>)`. Opening a file applies every
-- migration whose number is above the highest one recorded, so old files are
-- upgraded in place. Never edit a released migration: append a new one.
--
-- store_migrations and vector_migrations are numbered exactly as LangGraph's
-- Python SqliteStore numbers them, so a file written by either opens in the
-- other (docs/format.md).

-- migration: checkpoint_migrations 0
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    type TEXT,
    -- metadata sits before the checkpoint so that filtering on it never walks
    -- a large row's overflow pages.
    metadata TEXT NOT NULL DEFAULT '{}',
    checkpoint TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);

-- migration: checkpoint_migrations 1
CREATE TABLE IF NOT EXISTS checkpoint_blobs (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    channel TEXT NOT NULL,
    version TEXT NOT NULL,
    type TEXT NOT NULL,
    blob BLOB,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);

-- migration: checkpoint_migrations 2
CREATE TABLE IF NOT EXISTS checkpoint_writes (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT,
    blob BLOB NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

-- migration: checkpoint_migrations 3
CREATE INDEX IF NOT EXISTS checkpoints_run_id_idx
    ON checkpoints (json_extract(metadata, '$.run_id'))
    WHERE json_extract(metadata, '$.run_id') IS NOT NULL;

-- migration: checkpoint_migrations 4
-- Incremental blobs: a blob with a base_version holds only the elements its
-- list appended to the base version's list (a msgpack array of the tail);
-- chain counts the deltas since the last full snapshot (0 = full).
ALTER TABLE checkpoint_blobs ADD COLUMN base_version TEXT;
ALTER TABLE checkpoint_blobs ADD COLUMN chain INTEGER NOT NULL DEFAULT 0;

-- migration: checkpoint_migrations 5
-- Chains without snapshots: root_version names the full blob a delta's chain
-- starts from, and chain is the delta's position in it, so a whole chain is
-- one range read of the primary key (string versions sort by counter).
ALTER TABLE checkpoint_blobs ADD COLUMN root_version TEXT;

-- migration: checkpoint_migrations 6
-- Pending writes clustered on their primary key (WITHOUT ROWID): the key is
-- stored once, not again in an index beside the rows (a third of the table).
CREATE TABLE checkpoint_writes_clustered (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT,
    blob BLOB NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
) WITHOUT ROWID;
INSERT INTO checkpoint_writes_clustered
    (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path, created_at)
    SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path, created_at
    FROM checkpoint_writes;
DROP TABLE checkpoint_writes;
ALTER TABLE checkpoint_writes_clustered RENAME TO checkpoint_writes;

-- migration: checkpoint_migrations 7
-- Blob rows key their versions compactly and in order (docs/format.md,
-- "Blob keys": a LangGraph version loses its counter's zero padding, its
-- length kept in one letter); a task's pending writes to a checkpoint are one
-- row; neither blobs nor writes carry a creation time of their own (their
-- checkpoint's created_at dates them).
CREATE TABLE checkpoint_blobs_keyed (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    channel TEXT NOT NULL,
    version TEXT NOT NULL,
    type TEXT NOT NULL,
    blob BLOB,
    base_version TEXT,
    chain INTEGER NOT NULL DEFAULT 0,
    root_version TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);
INSERT INTO checkpoint_blobs_keyed
    (thread_id, checkpoint_ns, channel, version, type, blob, base_version, chain, root_version)
    SELECT thread_id, checkpoint_ns, channel, agentstate_blob_key(version), type, blob,
           agentstate_blob_key(base_version), chain, agentstate_blob_key(root_version)
    FROM checkpoint_blobs ORDER BY rowid;
DROP TABLE checkpoint_blobs;
ALTER TABLE checkpoint_blobs_keyed RENAME TO checkpoint_blobs;
-- One row per (checkpoint, task): `writes` packs the task's writes as a
-- msgpack array of [idx, channel, type, bytes] (docs/format.md), `n` counts
-- them; the key is stored once per task instead of once per write.
CREATE TABLE checkpoint_writes_packed (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    n INTEGER NOT NULL,
    writes BLOB NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id)
) WITHOUT ROWID;
INSERT INTO checkpoint_writes_packed (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, n, writes)
    SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, min(task_path), count(*),
           agentstate_pack_writes(idx, channel, type, blob)
    FROM checkpoint_writes GROUP BY thread_id, checkpoint_ns, checkpoint_id, task_id;
DROP TABLE checkpoint_writes;
ALTER TABLE checkpoint_writes_packed RENAME TO checkpoint_writes;

-- migration: checkpoint_migrations 8
-- No new tables: MessagePack checkpoint rows may now mark a channel that
-- has a version and no value as empty in their `values` map (docs/format.md)
-- instead of storing an `empty` row in checkpoint_blobs. The number keeps
-- binaries that do not know the mark from opening files that hold it.

-- migration: store_migrations 0
CREATE TABLE IF NOT EXISTS store (
    prefix text NOT NULL,
    key text NOT NULL,
    value text NOT NULL,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (prefix, key)
);

-- migration: store_migrations 1
CREATE INDEX IF NOT EXISTS store_prefix_idx ON store (prefix);

-- migration: store_migrations 2
ALTER TABLE store ADD COLUMN expires_at TIMESTAMP;

-- migration: store_migrations 3
ALTER TABLE store ADD COLUMN ttl_minutes REAL;

-- migration: store_migrations 4
CREATE INDEX IF NOT EXISTS idx_store_expires_at ON store (expires_at)
    WHERE expires_at IS NOT NULL;

-- migration: vector_migrations 0
CREATE TABLE IF NOT EXISTS store_vectors (
    prefix text NOT NULL,
    key text NOT NULL,
    field_name text NOT NULL,
    embedding BLOB,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (prefix, key, field_name),
    FOREIGN KEY (prefix, key) REFERENCES store(prefix, key) ON DELETE CASCADE
);

-- migration: agentstate_migrations 0
-- Our own additions, in a series of their own so that Python's numbering is
-- never disturbed. `agentstate_meta` records facts about the file, such as the
-- embedder that made the store's vectors (`store.embedder` = "name/dims").
CREATE TABLE IF NOT EXISTS agentstate_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- migration: agentstate_migrations 1
-- A generation counter per namespace prefix, bumped by triggers whenever an
-- item of that prefix is added, removed or changed (by any writer, Python's
-- SqliteStore included). Vectors are only ever written together with their
-- item's row (by us and by Python); the one exception, a reindex, bumps every
-- generation itself. The Store's in-memory search cache
-- reloads exactly the prefixes whose generation moved. TTL refreshes (which
-- only touch expires_at) do not bump it: expiry is always checked live.
-- (No OR IGNORE inside triggers: the firing statement's conflict policy
-- would override it.)
CREATE TABLE IF NOT EXISTS agentstate_store_gen (
    prefix TEXT PRIMARY KEY,
    gen INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO agentstate_store_gen (prefix, gen) SELECT DISTINCT prefix, 1 FROM store;
INSERT OR IGNORE INTO agentstate_store_gen (prefix, gen) SELECT DISTINCT prefix, 1 FROM store_vectors;
CREATE TRIGGER IF NOT EXISTS agentstate_store_ins AFTER INSERT ON store BEGIN
    INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
        WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = NEW.prefix;
END;
CREATE TRIGGER IF NOT EXISTS agentstate_store_del AFTER DELETE ON store BEGIN
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = OLD.prefix;
END;
CREATE TRIGGER IF NOT EXISTS agentstate_store_upd
AFTER UPDATE OF prefix, key, value, created_at, updated_at, ttl_minutes ON store BEGIN
    INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
        WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix IN (OLD.prefix, NEW.prefix);
END;

-- migration: agentstate_migrations 2
-- Lets list_namespaces skip expired items with an index-only scan.
CREATE INDEX IF NOT EXISTS agentstate_store_prefix_expires ON store (prefix, expires_at);

-- migration: agentstate_migrations 3
-- Vectors move the generation too: another writer (a raw connection, a
-- script, a future Python version) may change `store_vectors` without
-- touching the item's row, and the search cache must then reload the
-- prefix. Puts that write both bump it more than once; any move suffices.
CREATE TRIGGER IF NOT EXISTS agentstate_vectors_ins AFTER INSERT ON store_vectors BEGIN
    INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
        WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = NEW.prefix;
END;
CREATE TRIGGER IF NOT EXISTS agentstate_vectors_del AFTER DELETE ON store_vectors BEGIN
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = OLD.prefix;
END;
CREATE TRIGGER IF NOT EXISTS agentstate_vectors_upd
AFTER UPDATE OF prefix, key, field_name, embedding ON store_vectors BEGIN
    INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
        WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix IN (OLD.prefix, NEW.prefix);
END;

-- migration: agentstate_migrations 4
-- The Store's own batches bump each prefix's generation once, themselves,
-- instead of twice per item through the triggers (those cost a fifth of a
-- batch put). While a batch writes, its transaction holds a row in
-- agentstate_store_quiet, which the triggers check first; the batch deletes
-- it again before its transaction commits, so no other connection ever sees
-- it, and every other writer's changes bump the generation as before.
CREATE TABLE IF NOT EXISTS agentstate_store_quiet (x INTEGER PRIMARY KEY);
DROP TRIGGER IF EXISTS agentstate_store_ins;
DROP TRIGGER IF EXISTS agentstate_store_del;
DROP TRIGGER IF EXISTS agentstate_store_upd;
DROP TRIGGER IF EXISTS agentstate_vectors_ins;
DROP TRIGGER IF EXISTS agentstate_vectors_del;
DROP TRIGGER IF EXISTS agentstate_vectors_upd;
CREATE TRIGGER agentstate_store_ins AFTER INSERT ON store
WHEN NOT EXISTS (SELECT 1 FROM agentstate_store_quiet) BEGIN
    INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
        WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = NEW.prefix;
END;
CREATE TRIGGER agentstate_store_del AFTER DELETE ON store
WHEN NOT EXISTS (SELECT 1 FROM agentstate_store_quiet) BEGIN
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = OLD.prefix;
END;
CREATE TRIGGER agentstate_store_upd
AFTER UPDATE OF prefix, key, value, created_at, updated_at, ttl_minutes ON store
WHEN NOT EXISTS (SELECT 1 FROM agentstate_store_quiet) BEGIN
    INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
        WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix IN (OLD.prefix, NEW.prefix);
END;
CREATE TRIGGER agentstate_vectors_ins AFTER INSERT ON store_vectors
WHEN NOT EXISTS (SELECT 1 FROM agentstate_store_quiet) BEGIN
    INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
        WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = NEW.prefix;
END;
CREATE TRIGGER agentstate_vectors_del AFTER DELETE ON store_vectors
WHEN NOT EXISTS (SELECT 1 FROM agentstate_store_quiet) BEGIN
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = OLD.prefix;
END;
CREATE TRIGGER agentstate_vectors_upd
AFTER UPDATE OF prefix, key, field_name, embedding ON store_vectors
WHEN NOT EXISTS (SELECT 1 FROM agentstate_store_quiet) BEGIN
    INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
        WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
    UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix IN (OLD.prefix, NEW.prefix);
END;
