package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Memory is one remembered item a recall found.
type Memory struct {
	Kind       string    `json:"kind"` // "diary" or "episode"
	Text       string    `json:"text"`
	RecordedAt time.Time `json:"recorded_at"`
}

// Recall searches a seat's diary and episodes for every word of query
// (case-insensitive), newest first. An empty query returns the newest items.
func (s *Store) Recall(ctx context.Context, seat, query string, limit int) ([]Memory, error) {
	patterns := []string{}
	for _, w := range strings.Fields(query) {
		patterns = append(patterns, "%"+likeEscape(w)+"%")
	}
	rows, err := s.pool.Query(ctx, `
		SELECT kind, text, recorded_at FROM (
			SELECT 'diary' AS kind, content AS text, recorded_at FROM agent_diary WHERE seat = $1
			UNION ALL
			SELECT 'episode', summary, recorded_at FROM episodes WHERE seat = $1
		) m
		WHERE text ILIKE ALL ($2::text[])
		ORDER BY recorded_at DESC
		LIMIT $3`, seat, patterns, limit)
	if err != nil {
		return nil, fmt.Errorf("recall memory of %s: %w", seat, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Memory])
	if err != nil {
		return nil, fmt.Errorf("recall memory of %s: %w", seat, err)
	}
	return out, nil
}

// likeEscape makes s match itself in a LIKE pattern.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
