-- compare_and_swap_all is compare_and_swap for many keys in one
-- transaction and one round trip: the writes a ledger's callers make at
-- once share one commit. Each key succeeds or fails on its own, and its
-- result, at its index, says how: NULL when its stored revision is not its
-- p_prevs entry, -1 when this worker does not hold its lease at its
-- p_epochs entry (when p_owner is set), 0 when stored with no entries, and
-- otherwise the number of its first entry. p_entries holds every key's
-- entries one after another, p_counts[i] of them for key i.
--
-- The caller orders the keys: every writer locks lease rows and records in
-- key order, and the outbox last of all, so that two of these, or one and a
-- lease statement, never wait on each other in a circle. A lock it waits
-- for longer than a second (one held by a transaction stuck elsewhere)
-- fails it with SQLSTATE 55P03, having written nothing, so that it does not
-- hold up the writes of other keys queued behind it: its caller sends each
-- key on its own. It trims the outbox by up to p_step entries per write
-- that appended any, as that many calls of compare_and_swap would.
CREATE FUNCTION {{schema}}.compare_and_swap_all(
	p_keys text[], p_prevs bigint[], p_records bytea[], p_counts integer[], p_entries bytea[],
	p_retain bigint, p_step bigint, p_owner uuid, p_epochs bigint[]
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
BEGIN
	PERFORM set_config('lock_timeout', '1s', true);
	FOR i IN 1 .. n LOOP
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
			INSERT INTO {{schema}}.records (key, revision, record) VALUES (p_keys[i], 1, p_records[i])
			ON CONFLICT (key) DO NOTHING;
		ELSE
			UPDATE {{schema}}.records SET revision = p_prevs[i] + 1, record = p_records[i]
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
