package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/prices"
)

// Bounds of a ticket's tree as its cost reads it: deeper than
// tickets.max_hops can reach, and more tickets than any one request opens.
const (
	maxCostDepth = 64
	// MaxChainTickets is the most tickets GET /tickets/{id} lists in a chain.
	MaxChainTickets = 500
	// maxCostTickets bounds the tickets one listing's costs read.
	maxCostTickets = 50_000
)

// ticketTree is the tickets under the roots $1 (each with its root), at
// most maxCostDepth below them. A ticket has one parent, set when it was
// created, so each is reached once from each root above it.
var ticketTree = `
	WITH RECURSIVE tree AS (
		SELECT id AS root, id, parent, to_handle, serve_key, phase, created_at, 0 AS depth, ARRAY[id] AS path
		FROM tickets WHERE id = ANY($1::text[])
		UNION ALL
		SELECT tree.root, t.id, t.parent, t.to_handle, t.serve_key, t.phase, t.created_at, tree.depth + 1, tree.path || t.id
		FROM tickets t JOIN tree ON t.parent = tree.id
		WHERE tree.depth < ` + fmt.Sprint(maxCostDepth) + ` AND t.parent <> ''
	)`

// roundCost sums the rounds of one ticket's serving thread, r being
// turn_rounds joined on (to_handle, serve_key).
const roundCost = `count(r.round), coalesce(sum(r.nano_usd), 0), coalesce(sum(r.input_tokens), 0), coalesce(sum(r.output_tokens), 0),
	coalesce(sum(r.cached_tokens), 0), coalesce(sum(r.input_tokens + r.output_tokens) FILTER (WHERE NOT r.priced), 0)`

func scanCost(c *crewlet.Cost) []any {
	return []any{&c.Rounds, &c.NanoUSD, &c.InputTokens, &c.OutputTokens, &c.CachedTokens, &c.UnpricedTokens}
}

// TicketChain returns the ticket id and every ticket under it (its
// sub-tickets, theirs, to any depth), depth first, each with what the
// thread serving it cost and what it cost with everything under it; the
// first link is the ticket itself. truncated says the tree held more than
// MaxChainTickets tickets, so the totals count only those listed. A ticket
// to a remote agent costs nothing here (its calls are not crewlet's) and
// is marked remote. One query; ENOTFOUND when there is no such ticket.
func (s *Store) TicketChain(ctx context.Context, id string) (links []crewlet.TicketLink, truncated bool, err error) {
	rows, err := s.pool.Query(ctx, ticketTree+`
		SELECT c.id, c.parent, c.to_handle, c.phase, c.depth, `+roundCost+`
		FROM (SELECT * FROM tree LIMIT $2) c
		LEFT JOIN turn_rounds r ON r.seat = c.to_handle AND r.work_key = c.serve_key
		GROUP BY c.id, c.parent, c.to_handle, c.phase, c.depth, c.path, c.created_at
		ORDER BY c.path`, []string{id}, MaxChainTickets+1)
	if err != nil {
		return nil, false, fmt.Errorf("read the chain of ticket %s: %w", id, schemaMissing(err))
	}
	links, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (crewlet.TicketLink, error) {
		var l crewlet.TicketLink
		err := r.Scan(append([]any{&l.Ticket, &l.Parent, &l.To, &l.Phase, &l.Depth}, scanCost(&l.Own)...)...)
		l.Remote = strings.HasPrefix(l.To, config.A2APrefix)
		return l, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("read the chain of ticket %s: %w", id, err)
	}
	if len(links) == 0 {
		return nil, false, crewlet.Errorf(crewlet.ENOTFOUND, "no ticket %q; `crewlet tickets ls` lists them", id)
	}
	if len(links) > MaxChainTickets {
		links, truncated = dropOrphans(links[:MaxChainTickets]), true
	}
	rollUp(links)
	return links, truncated, nil
}

// dropOrphans keeps the links whose parent is kept: the query's limit cuts
// the tree breadth first, the listing is depth first.
func dropOrphans(links []crewlet.TicketLink) []crewlet.TicketLink {
	kept := map[string]bool{links[0].Ticket: true}
	out := links[:1]
	for _, l := range links[1:] {
		if kept[l.Parent] {
			kept[l.Ticket] = true
			out = append(out, l)
		}
	}
	return out
}

// rollUp sets each link's total: its own cost and its children's totals.
// links are depth first, so a child comes after its parent.
func rollUp(links []crewlet.TicketLink) {
	at := make(map[string]int, len(links))
	for i := range links {
		links[i].Own.USD = prices.USD(links[i].Own.NanoUSD)
		links[i].Total = links[i].Own
		at[links[i].Ticket] = i
	}
	for i := len(links) - 1; i > 0; i-- {
		if p, ok := at[links[i].Parent]; ok {
			links[p].Total.Add(links[i].Total)
		}
	}
	for i := range links {
		links[i].Total.USD = prices.USD(links[i].Total.NanoUSD)
	}
}

// TicketCosts returns what each ticket of ids cost with every ticket under
// it, in one query for the whole list.
func (s *Store) TicketCosts(ctx context.Context, ids []string) (map[string]crewlet.Cost, error) {
	out := make(map[string]crewlet.Cost, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, ticketTree+`
		SELECT c.root, `+roundCost+`
		FROM (SELECT * FROM tree LIMIT $2) c
		LEFT JOIN turn_rounds r ON r.seat = c.to_handle AND r.work_key = c.serve_key
		GROUP BY c.root`, ids, maxCostTickets)
	if err != nil {
		return nil, fmt.Errorf("read the cost of tickets: %w", schemaMissing(err))
	}
	var root string
	var c crewlet.Cost
	_, err = pgx.ForEachRow(rows, append([]any{&root}, scanCost(&c)...), func() error {
		c.USD = prices.USD(c.NanoUSD)
		out[root] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the cost of tickets: %w", err)
	}
	return out, nil
}
