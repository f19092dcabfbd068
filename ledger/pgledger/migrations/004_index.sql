-- The ledger's index (mcpsync.LedgerIndex): what each record is filed
-- under, and the order subjects joined the revoked set in, kept in the
-- transaction of every write, so that a revocation, a new session and a
-- revocation catch-up read the few rows they need instead of every record.

-- subjects are the SHA-256 digests of the record's mcpsync.Record.Subjects
-- (as its JSON stores them: text holds no NUL, and a GIN entry no subject
-- of a few kilobytes), unknown whether it is in UNSUBSCRIBE_UNKNOWN. The writer computes both from the record it
-- encodes: the record is bytes, not jsonb (see 001), so SQL cannot read
-- them reliably. Existing rows are filled in by the migration's step in Go
-- (backfillIndex), in this transaction.
--
-- indexed is the revision the index columns were written for, which must
-- be the row's: a write of an earlier release, which knows nothing of the
-- index, fails on it (check or not-null violation) instead of storing a
-- record its index columns do not describe. That includes a write already
-- under way when this migration began, which waits for its lock on the
-- table and then runs the earlier release's statement.
ALTER TABLE {{schema}}.records
	ADD COLUMN subjects bytea[] NOT NULL DEFAULT '{}',
	ADD COLUMN unknown boolean NOT NULL DEFAULT false,
	ADD COLUMN indexed bigint;
UPDATE {{schema}}.records SET indexed = revision;
ALTER TABLE {{schema}}.records
	ALTER COLUMN indexed SET NOT NULL,
	ADD CONSTRAINT records_indexed CHECK (indexed = revision);
-- Without fastupdate: its pending list would make every lookup scan what
-- was written since the last vacuum, and the write that overflows it flush
-- it all, inside an accept.
CREATE INDEX records_subjects ON {{schema}}.records USING gin (subjects) WITH (fastupdate = off);
CREATE INDEX records_unknown ON {{schema}}.records (key) WHERE unknown;

-- A revocation of the earlier release under way when this migration began
-- commits before it reads the revoked set (and one begun after waits for
-- it, to meet revocations_logged below at its commit).
LOCK TABLE {{schema}}.revoked, {{schema}}.revocation_meta IN EXCLUSIVE MODE;

-- revoked and revoked_log key a subject as text, which holds no NUL: each
-- backslash is doubled and each NUL written as a backslash and a zero
-- (subjectText). Subjects stored before hold no NUL, so doubling their
-- backslashes is all they need. The table is copied, not updated in place:
-- a key rewritten row by row could meet another's old key ("a\b" becomes
-- "a\\b" while a row keyed "a\\b" is still there).
ALTER TABLE {{schema}}.revoked RENAME TO revoked_unescaped;
ALTER INDEX {{schema}}.revoked_pkey RENAME TO revoked_unescaped_pkey;
CREATE TABLE {{schema}}.revoked (
	subject    text COLLATE "C" PRIMARY KEY,
	revocation bytea NOT NULL
);
INSERT INTO {{schema}}.revoked (subject, revocation)
SELECT replace(subject, E'\\', E'\\\\'), revocation FROM {{schema}}.revoked_unescaped;
DROP TABLE {{schema}}.revoked_unescaped;

-- A revocation of the earlier release keys its subject unescaped: with a
-- backslash it would meet another subject's key and replace that one's
-- revocation, raising no generation. Every write of revoked is refused
-- (SQLSTATE MCF02) unless its transaction says it keys subjects escaped
-- (Revoke and Restore set mcpsync.revocations).
CREATE FUNCTION {{schema}}.revoked_escaped() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF current_setting('mcpsync.revocations', true) IS DISTINCT FROM 'escaped' THEN
		RAISE EXCEPTION 'schema {{schema}} keys revocations escaped, as this release does: upgrade it'
			USING ERRCODE = 'MCF02';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER revoked_escaped BEFORE INSERT OR UPDATE ON {{schema}}.revoked
	FOR EACH ROW EXECUTE FUNCTION {{schema}}.revoked_escaped();

-- revoked_log numbers each subject that joined the revoked set: the one
-- that raised revocation_meta.generation to n is numbered n. Subjects
-- revoked before it existed join in subject order, since the order they
-- joined in was never stored; values of the generation are only compared
-- within one opened ledger.
CREATE TABLE {{schema}}.revoked_log (
	generation bigint PRIMARY KEY CHECK (generation > 0),
	subject    text COLLATE "C" NOT NULL UNIQUE
);
INSERT INTO {{schema}}.revoked_log (generation, subject)
SELECT row_number() OVER (ORDER BY subject), subject FROM {{schema}}.revoked;
UPDATE {{schema}}.revocation_meta SET generation = (SELECT count(*) FROM {{schema}}.revoked);

-- The writes of records take the record's index entry as parameters
-- (p_subjects, p_unknown; p_subjects and p_subject_counts in
-- compare_and_swap_all, one key's after another's, as p_entries). The old
-- signatures are gone: a worker of an earlier release still running gets
-- SQLSTATE MCF02 from them, having written nothing, instead of a write
-- that leaves the index behind.
DROP FUNCTION {{schema}}.compare_and_swap(text, bigint, bytea, bytea[], bigint, bigint, uuid, bigint);
DROP FUNCTION {{schema}}.compare_and_swap_all(text[], bigint[], bytea[], integer[], bytea[], bigint, bigint, uuid, bigint[]);

CREATE FUNCTION {{schema}}.compare_and_swap(
	p_key text, p_prev bigint, p_record bytea, p_entries bytea[],
	p_retain bigint, p_step bigint, p_owner uuid, p_epoch bigint
) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'schema {{schema}} keeps an index this release does not write: upgrade it'
		USING ERRCODE = 'MCF02';
END
$$;

CREATE FUNCTION {{schema}}.compare_and_swap_all(
	p_keys text[], p_prevs bigint[], p_records bytea[], p_counts integer[], p_entries bytea[],
	p_retain bigint, p_step bigint, p_owner uuid, p_epochs bigint[]
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'schema {{schema}} keeps an index this release does not write: upgrade it'
		USING ERRCODE = 'MCF02';
END
$$;

-- compare_and_swap is 001's, storing the record's index entry with it.
CREATE FUNCTION {{schema}}.compare_and_swap(
	p_key text, p_prev bigint, p_record bytea, p_entries bytea[],
	p_retain bigint, p_step bigint, p_owner uuid, p_epoch bigint,
	p_subjects bytea[], p_unknown boolean
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
		INSERT INTO {{schema}}.records (key, revision, record, subjects, unknown, indexed)
		VALUES (p_key, 1, p_record, coalesce(p_subjects, '{}'), p_unknown, 1)
		ON CONFLICT (key) DO NOTHING;
	ELSE
		UPDATE {{schema}}.records
		SET revision = p_prev + 1, record = p_record, subjects = coalesce(p_subjects, '{}'), unknown = p_unknown,
			indexed = p_prev + 1
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

-- compare_and_swap_all is 002's, storing each record's index entry with
-- it: key i's subjects are p_subject_counts[i] of p_subjects, after those
-- of the keys before it.
CREATE FUNCTION {{schema}}.compare_and_swap_all(
	p_keys text[], p_prevs bigint[], p_records bytea[], p_counts integer[], p_entries bytea[],
	p_retain bigint, p_step bigint, p_owner uuid, p_epochs bigint[],
	p_subjects bytea[], p_subject_counts integer[], p_unknown boolean[]
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
	n      integer := coalesce(cardinality(p_keys), 0);
	res    bigint[] := array_fill(NULL::bigint, ARRAY[n]);
	stored boolean[] := array_fill(false, ARRAY[n]);
	total  bigint := 0;
	v_last bigint;
	seqs   bigint[] := '{}';
	bodies bytea[] := '{}';
	first  bigint;
	at     integer := 1;
	writes integer := 0;
	s_at   integer := 1;
	subs   bytea[];
BEGIN
	PERFORM set_config('lock_timeout', '1s', true);
	FOR i IN 1 .. n LOOP
		-- An empty slice when the key has none (upper below lower).
		subs := coalesce(p_subjects[s_at : s_at + p_subject_counts[i] - 1], '{}');
		s_at := s_at + p_subject_counts[i];
		IF p_owner IS NOT NULL THEN
			-- FOR SHARE, as in compare_and_swap.
			PERFORM 1 FROM {{schema}}.leases
			WHERE key = p_keys[i] AND owner = p_owner AND epoch = p_epochs[i] FOR SHARE;
			IF NOT FOUND THEN
				res[i] := -1;
				CONTINUE;
			END IF;
		END IF;
		IF p_prevs[i] = 0 THEN
			INSERT INTO {{schema}}.records (key, revision, record, subjects, unknown, indexed)
			VALUES (p_keys[i], 1, p_records[i], subs, p_unknown[i], 1)
			ON CONFLICT (key) DO NOTHING;
		ELSE
			UPDATE {{schema}}.records
			SET revision = p_prevs[i] + 1, record = p_records[i], subjects = subs, unknown = p_unknown[i],
				indexed = p_prevs[i] + 1
			WHERE key = p_keys[i] AND revision = p_prevs[i];
		END IF;
		IF FOUND THEN
			stored[i] := true;
			res[i] := 0;
			total := total + p_counts[i];
		END IF;
	END LOOP;
	IF total = 0 THEN
		RETURN res;
	END IF;
	UPDATE {{schema}}.outbox_meta SET last = last + total RETURNING last INTO v_last;
	first := v_last - total + 1;
	FOR i IN 1 .. n LOOP
		IF stored[i] AND p_counts[i] > 0 THEN
			writes := writes + 1;
			res[i] := first;
			FOR j IN 0 .. p_counts[i] - 1 LOOP
				seqs := seqs || (first + j);
				bodies := bodies || p_entries[at + j];
			END LOOP;
			first := first + p_counts[i];
		END IF;
		at := at + p_counts[i];
	END LOOP;
	INSERT INTO {{schema}}.outbox (seq, entry) SELECT * FROM unnest(seqs, bodies);
	PERFORM {{schema}}.trim_outbox(p_retain, p_step * writes);
	PERFORM pg_notify('{{channel}}', v_last::text);
	RETURN res;
END
$$;

-- A revocation by a worker of an earlier release raises the generation
-- without numbering its subject in revoked_log, which RevokedAfter reads:
-- engines of this release would see the generation move and learn of no
-- subject. Checked at commit, a transaction that leaves the generation
-- apart from the log fails with SQLSTATE MCF02, having written nothing.
CREATE FUNCTION {{schema}}.revocations_logged() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT generation FROM {{schema}}.revocation_meta) <>
	   (SELECT coalesce(max(generation), 0) FROM {{schema}}.revoked_log) THEN
		RAISE EXCEPTION 'schema {{schema}} numbers revocations this release does not: upgrade it'
			USING ERRCODE = 'MCF02';
	END IF;
	RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER revocations_logged
	AFTER INSERT OR UPDATE ON {{schema}}.revocation_meta
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION {{schema}}.revocations_logged();
