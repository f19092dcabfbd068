-- compare_and_swap_unflushed and compare_and_swap_all_unflushed are
-- compare_and_swap and compare_and_swap_all committed without waiting for
-- the WAL flush (synchronous_commit off for their own transaction), so
-- that the locks they take - the outbox numbering's row, the lease rows,
-- the notification queue - are let go when they commit instead of after
-- their flush, and the writes of other workers do not queue behind that
-- flush (early lock release). Their caller waits for the flush (a
-- transaction of its own committed synchronously after them, whose flush
-- covers theirs) before it reports the write: nothing it reports is lost
-- by a crash, and a transaction that depends on their writes (a takeover of
-- a lease, an acknowledgement of an entry) commits after them, so is never
-- durable without them.
CREATE FUNCTION {{schema}}.compare_and_swap_unflushed(
	p_key text, p_prev bigint, p_record bytea, p_entries bytea[],
	p_retain bigint, p_step bigint, p_owner uuid, p_epoch bigint,
	p_subjects bytea[], p_unknown boolean
) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM set_config('synchronous_commit', 'off', true);
	RETURN {{schema}}.compare_and_swap(p_key, p_prev, p_record, p_entries, p_retain, p_step,
		p_owner, p_epoch, p_subjects, p_unknown);
END
$$;

CREATE FUNCTION {{schema}}.compare_and_swap_all_unflushed(
	p_keys text[], p_prevs bigint[], p_records bytea[], p_counts integer[], p_entries bytea[],
	p_retain bigint, p_step bigint, p_owner uuid, p_epochs bigint[],
	p_subjects bytea[], p_subject_counts integer[], p_unknown boolean[]
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM set_config('synchronous_commit', 'off', true);
	RETURN {{schema}}.compare_and_swap_all(p_keys, p_prevs, p_records, p_counts, p_entries, p_retain, p_step,
		p_owner, p_epochs, p_subjects, p_subject_counts, p_unknown);
END
$$;
