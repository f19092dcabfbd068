-- The ledger's tables, in the schema {{schema}}. Applied once, in one
-- transaction, under the schema's advisory lock (see migrate).

-- records holds one row per normalized URI: mcpsync.EncodeRecord's JSON,
-- stored as bytes (content text may hold NUL, which jsonb refuses), beside
-- the revision CompareAndSwap compares. Keys sort bytewise, as Range
-- promises.
CREATE TABLE {{schema}}.records (
	key      text COLLATE "C" PRIMARY KEY,
	revision bigint NOT NULL CHECK (revision > 0),
	record   bytea NOT NULL
);

-- outbox holds the retained entries, numbered consecutively from
-- outbox_meta.first to outbox_meta.last. An entry's number is its seq: the
-- JSON (mcpsync.EncodeOutboxEntry's) carries zero there, since the number is
-- only known inside the transaction that appends it.
CREATE TABLE {{schema}}.outbox (
	seq   bigint PRIMARY KEY,
	entry bytea NOT NULL
);

-- outbox_meta is one row: the newest number ever appended, the oldest
-- retained, and what the retention bound dropped. Every append updates it,
-- which serializes appenders and keeps the numbering gap-free across every
-- process.
CREATE TABLE {{schema}}.outbox_meta (
	one             boolean PRIMARY KEY DEFAULT true CHECK (one),
	last            bigint NOT NULL DEFAULT 0,
	first           bigint NOT NULL DEFAULT 1,
	dropped         bigint NOT NULL DEFAULT 0,
	dropped_through bigint NOT NULL DEFAULT 0
);
INSERT INTO {{schema}}.outbox_meta DEFAULT VALUES;

CREATE TABLE {{schema}}.consumers (
	name     text COLLATE "C" PRIMARY KEY,
	position bigint NOT NULL
);

-- counters hold every value of a uint64: numeric, not bigint.
CREATE TABLE {{schema}}.counters (
	name text COLLATE "C" PRIMARY KEY,
	last numeric(20, 0) NOT NULL CHECK (last >= 0 AND last <= 18446744073709551615)
);

CREATE TABLE {{schema}}.revoked (
	subject    text COLLATE "C" PRIMARY KEY,
	revocation bytea NOT NULL
);

-- revocation_meta.generation is RevokedGeneration: raised in the
-- transaction that adds a subject.
CREATE TABLE {{schema}}.revocation_meta (
	one        boolean PRIMARY KEY DEFAULT true CHECK (one),
	generation bigint NOT NULL DEFAULT 0
);
INSERT INTO {{schema}}.revocation_meta DEFAULT VALUES;

-- leases split keys among workers: taking one raises its epoch, and a
-- fenced CompareAndSwap of a key requires the lease at the epoch its writer
-- took it with. members are the workers alive, by heartbeat.
CREATE TABLE {{schema}}.leases (
	key        text COLLATE "C" PRIMARY KEY,
	owner      uuid NOT NULL,
	epoch      bigint NOT NULL CHECK (epoch > 0),
	expires_at timestamptz NOT NULL
);
CREATE INDEX ON {{schema}}.leases (owner);

CREATE TABLE {{schema}}.members (
	worker       uuid PRIMARY KEY,
	heartbeat_at timestamptz NOT NULL
);

-- trim_outbox deletes, at most p_step at a time, the entries every consumer
-- passed and those beyond the newest p_retain, counting the latter as
-- dropped when a consumer had not passed them. Its caller holds the
-- outbox_meta row, so the consumers it reads are every one registered
-- before.
CREATE FUNCTION {{schema}}.trim_outbox(p_retain bigint, p_step bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	m      {{schema}}.outbox_meta;
	passed bigint;
	upto   bigint;
	lost   bigint;
BEGIN
	SELECT * INTO m FROM {{schema}}.outbox_meta FOR UPDATE;
	SELECT coalesce(min(position), 0) INTO passed FROM {{schema}}.consumers;
	upto := least(greatest(passed, m.last - p_retain), m.first + p_step - 1, m.last);
	IF upto < m.first THEN
		RETURN;
	END IF;
	DELETE FROM {{schema}}.outbox WHERE seq BETWEEN m.first AND upto;
	lost := upto - greatest(m.first - 1, passed);
	IF lost > 0 THEN
		UPDATE {{schema}}.outbox_meta
		SET first = upto + 1, dropped = dropped + lost, dropped_through = upto;
	ELSE
		UPDATE {{schema}}.outbox_meta SET first = upto + 1;
	END IF;
END
$$;

-- compare_and_swap is Ledger.CompareAndSwap in one statement, so in one
-- transaction and one round trip: the lease check (when p_owner is set), the
-- record, the numbering, the entries, the trim and the wake-up commit
-- together or not at all. It returns NULL when the stored revision is not
-- p_prev, 0 when it appended nothing, and otherwise the first entry's
-- number; a writer that does not hold the key's lease at p_epoch gets
-- SQLSTATE MCF01 and writes nothing.
CREATE FUNCTION {{schema}}.compare_and_swap(
	p_key text, p_prev bigint, p_record bytea, p_entries bytea[],
	p_retain bigint, p_step bigint, p_owner uuid, p_epoch bigint
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	n      bigint := coalesce(cardinality(p_entries), 0);
	v_last bigint;
BEGIN
	IF p_owner IS NOT NULL THEN
		-- FOR SHARE: a takeover of the lease waits for this write to end,
		-- and a write after a takeover sees the raised epoch.
		PERFORM 1 FROM {{schema}}.leases
		WHERE key = p_key AND owner = p_owner AND epoch = p_epoch FOR SHARE;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'lease of % not held by % at epoch %', p_key, p_owner, p_epoch
				USING ERRCODE = 'MCF01';
		END IF;
	END IF;
	IF p_prev = 0 THEN
		INSERT INTO {{schema}}.records (key, revision, record) VALUES (p_key, 1, p_record)
		ON CONFLICT (key) DO NOTHING;
	ELSE
		UPDATE {{schema}}.records SET revision = p_prev + 1, record = p_record
		WHERE key = p_key AND revision = p_prev;
	END IF;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	IF n = 0 THEN
		RETURN 0;
	END IF;
	UPDATE {{schema}}.outbox_meta SET last = last + n RETURNING last INTO v_last;
	INSERT INTO {{schema}}.outbox (seq, entry)
	SELECT v_last - n + i, e FROM unnest(p_entries) WITH ORDINALITY AS u (e, i);
	PERFORM {{schema}}.trim_outbox(p_retain, p_step);
	PERFORM pg_notify('{{channel}}', v_last::text);
	RETURN v_last - n + 1;
END
$$;

-- ack is Ledger.Ack: a consumer's position only rises, stops at the newest
-- entry, and starts, for a new consumer, at the oldest retained one.
CREATE FUNCTION {{schema}}.ack(p_consumer text, p_seq bigint, p_retain bigint, p_step bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	m {{schema}}.outbox_meta;
BEGIN
	SELECT * INTO m FROM {{schema}}.outbox_meta FOR UPDATE;
	INSERT INTO {{schema}}.consumers AS c (name, position)
	VALUES (p_consumer, greatest(m.first - 1, least(p_seq, m.last)))
	ON CONFLICT (name) DO UPDATE SET position = greatest(c.position, least(p_seq, m.last));
	PERFORM {{schema}}.trim_outbox(p_retain, p_step);
END
$$;
