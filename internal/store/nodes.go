package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
)

// NodeRow is a node incarnation's presence row.
type NodeRow struct {
	Incarnation string            `json:"incarnation"`
	NodeID      string            `json:"node_id"`
	HostQueue   string            `json:"host_queue"`
	Labels      map[string]string `json:"labels"`
	Capacity    int               `json:"capacity"`
	// SeatsDigest names the seats of the node's org file (config
	// SeatsDigest); "" for a node started before migration 0018.
	SeatsDigest string `json:"seats_digest"`
	// BuildID is the worker build the node runs; "" for a node started
	// before migration 0030.
	BuildID     string           `json:"build_id"`
	Draining    bool             `json:"draining"`
	SeatsHeld   int              `json:"seats_held"`
	Unproven    map[string]int64 `json:"unproven_seconds,omitempty"`
	StartedAt   time.Time        `json:"started_at"`
	HeartbeatAt time.Time        `json:"heartbeat_at"`
	StoppedAt   *time.Time       `json:"stopped_at,omitempty"`
	// HeartbeatAge is how long ago the node last beat, by the database clock.
	HeartbeatAge time.Duration `json:"-"`
}

// RegisterNode writes a new incarnation's presence row.
func (s *Store) RegisterNode(ctx context.Context, n NodeRow) error {
	labels, err := json.Marshal(n.Labels)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `
		INSERT INTO nodes (incarnation, node_id, host_queue, labels, capacity, seats_digest, build_id) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		n.Incarnation, n.NodeID, n.HostQueue, labels, n.Capacity, n.SeatsDigest, n.BuildID)
	if err != nil {
		return fmt.Errorf("register node %s: %w", n.Incarnation, schemaMissing(err))
	}
	return nil
}

// NodeHeartbeat stamps the node's heartbeat with what it holds and returns
// whether someone asked it to drain (POST /nodes/{id}/drain). A node that
// beats again after a peer claimed it (it fenced itself and came back) is
// unclaimed: it is alive, and when it dies for good it is claimed anew.
func (s *Store) NodeHeartbeat(ctx context.Context, incarnation string, held int, unproven map[string]int64) (draining bool, err error) {
	if unproven == nil {
		unproven = map[string]int64{}
	}
	u, err := json.Marshal(unproven)
	if err != nil {
		return false, err
	}
	err = s.pool.QueryRow(ctx, `
		UPDATE nodes SET heartbeat_at = now(), seats_held = $2, unproven = $3, claimed_by = NULL, claimed_at = NULL
		WHERE incarnation = $1 RETURNING draining`, incarnation, held, u).Scan(&draining)
	if err != nil {
		return false, fmt.Errorf("node %s heartbeat: %w", incarnation, schemaMissing(err))
	}
	return draining, nil
}

// SetNodeDraining marks live nodes draining: the incarnation named by id, or
// every live incarnation of the node id. It returns the incarnations marked;
// ENOTFOUND when no live node matches, ECONFLICT when all are already draining.
func (s *Store) SetNodeDraining(ctx context.Context, id string, liveWithin time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE nodes SET draining = true
		WHERE (incarnation = $1 OR node_id = $1) AND stopped_at IS NULL
		  AND heartbeat_at > now() - make_interval(secs => $2) AND NOT draining
		RETURNING incarnation`, id, liveWithin.Seconds())
	if err != nil {
		return nil, fmt.Errorf("drain node %s: %w", id, schemaMissing(err))
	}
	marked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("drain node %s: %w", id, err)
	}
	if len(marked) > 0 {
		return marked, nil
	}
	var draining bool
	err = s.pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM nodes WHERE (incarnation = $1 OR node_id = $1) AND stopped_at IS NULL
		  AND heartbeat_at > now() - make_interval(secs => $2))`, id, liveWithin.Seconds()).Scan(&draining)
	if err != nil {
		return nil, fmt.Errorf("drain node %s: %w", id, err)
	}
	if draining {
		return nil, crewlet.Errorf(crewlet.ECONFLICT, "node %s is already draining", id)
	}
	return nil, crewlet.Errorf(crewlet.ENOTFOUND, "no live node %q; `crewlet nodes ls` lists them", id)
}

// MarkNodeDraining marks one incarnation draining (the node itself, on SIGTERM).
func (s *Store) MarkNodeDraining(ctx context.Context, incarnation string) error {
	_, err := s.pool.Exec(ctx, `UPDATE nodes SET draining = true WHERE incarnation = $1`, incarnation)
	if err != nil {
		return fmt.Errorf("mark node %s draining: %w", incarnation, schemaMissing(err))
	}
	return nil
}

// StopNode records that an incarnation exited; it is no longer live.
func (s *Store) StopNode(ctx context.Context, incarnation string) error {
	_, err := s.pool.Exec(ctx, `UPDATE nodes SET stopped_at = now() WHERE incarnation = $1`, incarnation)
	if err != nil {
		return fmt.Errorf("stop node %s: %w", incarnation, schemaMissing(err))
	}
	return nil
}

// Nodes returns node rows: only live ones (heartbeat within liveWithin, not
// stopped) unless all is set.
func (s *Store) Nodes(ctx context.Context, liveWithin time.Duration, all bool) ([]NodeRow, error) {
	return nodes(ctx, s.pool, liveWithin, all)
}

// NodesOnAnotherOrg returns the live incarnations whose org file names other
// seats than digest, leaving out those of node self: an earlier incarnation
// of this node ran the file this one replaced, and is dead or about to be.
// A worker stops no seat and stamps no mailbox absent while any remain, since
// one of the two files is stale and nothing says which.
func (s *Store) NodesOnAnotherOrg(ctx context.Context, liveWithin time.Duration, self, digest string) ([]string, error) {
	live, err := s.Nodes(ctx, liveWithin, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range live {
		if n.NodeID != self && n.SeatsDigest != digest {
			out = append(out, n.Incarnation)
		}
	}
	return out, nil
}

// querier is what a pool and a transaction share, so a read can run inside a
// transaction that already holds a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func nodes(ctx context.Context, q querier, liveWithin time.Duration, all bool) ([]NodeRow, error) {
	rows, err := q.Query(ctx, `
		SELECT incarnation, node_id, host_queue, labels, capacity, seats_digest, build_id, draining, seats_held, unproven,
		       started_at, heartbeat_at, stopped_at, now() - heartbeat_at
		FROM nodes
		WHERE $2 OR (stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => $1))
		ORDER BY incarnation`, liveWithin.Seconds(), all)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeRow, error) {
		var n NodeRow
		err := r.Scan(&n.Incarnation, &n.NodeID, &n.HostQueue, &n.Labels, &n.Capacity, &n.SeatsDigest, &n.BuildID, &n.Draining, &n.SeatsHeld,
			&n.Unproven, &n.StartedAt, &n.HeartbeatAt, &n.StoppedAt, &n.HeartbeatAge)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// SeatHosts returns, for every seat, the incarnation holding or reserved for
// it and the node id it prefers.
func (s *Store) SeatHosts(ctx context.Context) (hosts, preferred map[string]string, err error) {
	return seatHosts(ctx, s.pool)
}

func seatHosts(ctx context.Context, q querier) (hosts, preferred map[string]string, err error) {
	rows, err := q.Query(ctx, `SELECT handle, node, preferred_node FROM seats`)
	if err != nil {
		return nil, nil, fmt.Errorf("list seat hosts: %w", schemaMissing(err))
	}
	defer rows.Close()
	hosts, preferred = map[string]string{}, map[string]string{}
	for rows.Next() {
		var h, n, p string
		if err := rows.Scan(&h, &n, &p); err != nil {
			return nil, nil, fmt.Errorf("list seat hosts: %w", err)
		}
		hosts[h], preferred[h] = n, p
	}
	return hosts, preferred, rows.Err()
}

// placementLock serialises placement decisions, so two seats placed at once
// both see each other's reservation and fair shares hold.
const placementLock = 0x706c6163 // "plac"

// RoleLoad is how many seats of one role a node incarnation holds or is
// reserved for.
type RoleLoad struct {
	Node  string
	Role  string
	Seats int
}

// Reserve places the seats handles under the placement lock: it reads node
// liveness, how many seats of each role every node holds, and where the
// seats handles are now and prefer to be (hosts, preferred), calls choose,
// and records the incarnation choose picked for each seat (handle →
// incarnation; a seat it could not place is left out) as that seat's node.
// That is a reservation, which Attach on that node turns into a tenure.
// The read is per node and role, not per seat, and one call places any
// number of seats: seats placed together cost one lock and one read.
func (s *Store) Reserve(ctx context.Context, handles []string, liveWithin time.Duration,
	choose func(nodes []NodeRow, load []RoleLoad, hosts, preferred map[string]string) map[string]string) (map[string]string, error) {
	var chosen map[string]string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, placementLock); err != nil {
			return err
		}
		// Read inside the transaction: it already holds a connection, and
		// asking the pool for another while others wait on the lock with
		// theirs can exhaust it.
		nodes, err := nodes(ctx, tx, liveWithin, false)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT node, role, count(*)::int FROM seats WHERE node <> '' GROUP BY node, role`)
		if err != nil {
			return err
		}
		load, err := pgx.CollectRows(rows, pgx.RowToStructByPos[RoleLoad])
		if err != nil {
			return err
		}
		hosts, preferred := map[string]string{}, map[string]string{}
		rows, err = tx.Query(ctx, `SELECT handle, node, preferred_node FROM seats WHERE handle = ANY($1)`, handles)
		if err != nil {
			return err
		}
		var h, n, p string
		if _, err := pgx.ForEachRow(rows, []any{&h, &n, &p}, func() error {
			hosts[h], preferred[h] = n, p
			return nil
		}); err != nil {
			return err
		}
		chosen = choose(nodes, load, hosts, preferred)
		if len(chosen) == 0 {
			return nil
		}
		placed := make([]string, 0, len(chosen))
		incarnations := make([]string, 0, len(chosen))
		for h, inc := range chosen {
			placed, incarnations = append(placed, h), append(incarnations, inc)
		}
		_, err = tx.Exec(ctx, `
			UPDATE seats SET node = c.node, updated_at = now()
			FROM unnest($1::text[], $2::text[]) AS c (handle, node)
			WHERE seats.handle = c.handle`, placed, incarnations)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("place seats: %w", schemaMissing(err))
	}
	return chosen, nil
}

// ClaimDeadNodes claims, for the node claimer, every other incarnation that
// stopped or has not beaten for longer than timeout and that no node claimed
// yet: one compare-and-set per row, so each dead incarnation is claimed by
// exactly one live node, which then tells its seats.
func (s *Store) ClaimDeadNodes(ctx context.Context, claimer string, timeout time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE nodes SET claimed_by = $1, claimed_at = now()
		WHERE claimed_by IS NULL AND incarnation <> $1
		  AND (stopped_at IS NOT NULL OR heartbeat_at < now() - make_interval(secs => $2))
		RETURNING incarnation`, claimer, timeout.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claim dead nodes: %w", schemaMissing(err))
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("claim dead nodes: %w", err)
	}
	return claimed, nil
}

// UnclaimNode gives a claim back, so the next beat's detector (this node's
// or a peer's) tries that incarnation again.
func (s *Store) UnclaimNode(ctx context.Context, incarnation string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE nodes SET claimed_by = NULL, claimed_at = NULL WHERE incarnation = $1`, incarnation); err != nil {
		return fmt.Errorf("unclaim node %s: %w", incarnation, schemaMissing(err))
	}
	return nil
}

// SeatsOn returns the seats whose current tenure is on the incarnation.
func (s *Store) SeatsOn(ctx context.Context, incarnation string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT handle FROM seats WHERE node = $1 ORDER BY handle`, incarnation)
	if err != nil {
		return nil, fmt.Errorf("seats on %s: %w", incarnation, schemaMissing(err))
	}
	seats, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("seats on %s: %w", incarnation, err)
	}
	return seats, nil
}

// TenuresBegunElsewhere returns the tenures begun at or after since on
// any incarnation but the given one (handle → the epoch Attach gave it),
// and the database's time as it read them, from which the next read goes
// on. A nil since reads from the database's now: nothing yet, only the time.
func (s *Store) TenuresBegunElsewhere(ctx context.Context, incarnation string, since *time.Time) (map[string]int64, time.Time, error) {
	var (
		now     time.Time
		handles []string
		epochs  []int64
	)
	err := s.pool.QueryRow(ctx, `
		SELECT now(), array_agg(handle), array_agg(epoch) FROM seats
		WHERE acquired_at >= coalesce($2, now()) AND node <> $1`, incarnation, since).Scan(&now, &handles, &epochs)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read the tenures begun elsewhere: %w", schemaMissing(err))
	}
	begun := make(map[string]int64, len(handles))
	for i, h := range handles {
		begun[h] = epochs[i]
	}
	return begun, now, nil
}

// MovedOn returns the seats of hosted (handle → the epoch the incarnation
// hosts it at) whose tenure moved on: their epoch in Postgres is another
// one, begun on another incarnation.
func (s *Store) MovedOn(ctx context.Context, incarnation string, hosted map[string]int64) ([]string, error) {
	if len(hosted) == 0 {
		return nil, nil
	}
	handles := make([]string, 0, len(hosted))
	epochs := make([]int64, 0, len(hosted))
	for h, e := range hosted {
		handles, epochs = append(handles, h), append(epochs, e)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT h.handle FROM unnest($1::text[], $2::bigint[]) AS h (handle, epoch)
		JOIN seats s ON s.handle = h.handle
		WHERE s.epoch <> h.epoch AND s.node <> $3
		ORDER BY h.handle`, handles, epochs, incarnation)
	if err != nil {
		return nil, fmt.Errorf("check hosted tenures: %w", schemaMissing(err))
	}
	moved, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check hosted tenures: %w", err)
	}
	return moved, nil
}
