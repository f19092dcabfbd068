-- alive_lock is the key of the session advisory lock a member holds, on a
-- connection of its own, for as long as its process lives: when the
-- process dies, PostgreSQL ends that session and frees the lock at once,
-- and the other workers take its leases without waiting for them to
-- expire. NULL for a member that holds none (it is alive until its
-- heartbeat expires).
ALTER TABLE {{schema}}.members ADD COLUMN alive_lock bigint CHECK (alive_lock >= 0);

-- gone lists the members whose process is known dead: they hold an
-- alive_lock key and nobody holds that lock. Their leases may be taken
-- before they expire: their epochs fence whatever such a member, were it
-- alive after all, still writes.
CREATE FUNCTION {{schema}}.gone() RETURNS SETOF uuid
LANGUAGE sql STABLE AS $$
	SELECT m.worker FROM {{schema}}.members AS m
	WHERE m.alive_lock IS NOT NULL AND NOT EXISTS (
		SELECT FROM pg_locks AS k
		WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
			AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND k.classid = (m.alive_lock >> 32)::oid AND k.objid = (m.alive_lock & 4294967295)::oid)
$$;
