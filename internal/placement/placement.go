// Package placement is crewlet's placement arithmetic: which node a seat
// establishes on, how many seats of a placement group each node may hold (its
// fair share), which seats the rebalance duty moves, and which groups no node
// can serve.
//
// The package is pure. It reads a Snapshot the caller assembles (live nodes
// from their presence rows, placement groups from the config, and where each
// seat is hosted) and does no I/O and reads no clock, so the activity that
// picks a node at establish, the rebalance duty and GET /nodes all reach the
// same answers from the same facts.
//
// The share of a group is ceil(group size / non-draining nodes matching it).
// Because it is a ceiling, the shares over a group's matching nodes sum to at
// least its size, so every group some live non-draining node matches is
// covered, and a node at its share has no room to re-take what it just gave
// up: rebalancing converges rather than oscillating.
package placement

import (
	"fmt"
	"sort"
)

// Node is a live worker node incarnation as its presence row says.
type Node struct {
	Incarnation string            // "{node_id}:{random}"
	NodeID      string            // stable id, used for stickiness
	HostQueue   string            // task queue of the node's host worker
	Labels      map[string]string // labels the node carries
	Capacity    int               // most seats it will host; 0 = no limit
	Draining    bool              // a draining node takes no seat and counts in no share
	Unproven    int               // seats whose teardown could not be proven; they count against capacity
}

// Group is a placement group: agent seats whose roles ask for the same labels.
type Group struct {
	Key    string            // canonical, "" for no labels
	Labels map[string]string // a node matches when it carries every label (superset match)
	Seats  []string          // seat handles, in the config's order
}

// Snapshot is what placement decisions read. Nodes must be LIVE nodes only
// (the caller filters by heartbeat). Hosts maps seat handle -> incarnation
// currently holding or reserved for it ("" or missing = none).
//
// Load is what Choose weighs nodes by. Left empty, it is counted from Hosts,
// which must then hold every seat; a caller placing seats supplies Load
// counted by the database instead, and Hosts need hold only the seats it
// places: reading every seat's host for each placement would cost O(seats)
// per seat.
type Snapshot struct {
	Nodes  []Node
	Groups []Group
	Hosts  map[string]string
	Load   Load
}

// Load is how many seats each node incarnation holds or is reserved for:
// per placement group, and in all (seats in no group count only there).
type Load struct {
	held  map[string]map[string]int // incarnation -> group key -> seats
	total map[string]int            // incarnation -> seats
}

// NewLoad returns an empty Load to Add to.
func NewLoad() Load {
	return Load{held: map[string]map[string]int{}, total: map[string]int{}}
}

// Add counts n more seats of the group with key groupKey on incarnation.
func (l Load) Add(incarnation, groupKey string, n int) {
	if l.held[incarnation] == nil {
		l.held[incarnation] = map[string]int{}
	}
	l.held[incarnation][groupKey] += n
	l.total[incarnation] += n
}

// AddUngrouped counts n more seats of no placement group on incarnation:
// they take room, but in no group's share.
func (l Load) AddUngrouped(incarnation string, n int) {
	l.total[incarnation] += n
}

// LoadOf counts hosts (seat handle -> incarnation) by the groups' seats.
func LoadOf(groups []Group, hosts map[string]string) Load {
	l := NewLoad()
	grouped := map[string]string{}
	for _, g := range groups {
		for _, h := range g.Seats {
			grouped[h] = g.Key
		}
	}
	for h, inc := range hosts {
		if inc == "" {
			continue
		}
		if key, ok := grouped[h]; ok {
			l.Add(inc, key, 1)
		} else {
			l.AddUngrouped(inc, 1)
		}
	}
	return l
}

// load is the Load Choose weighs nodes by.
func (s Snapshot) load() Load {
	if s.Load.total != nil {
		return s.Load
	}
	return LoadOf(s.Groups, s.Hosts)
}

// Place records handle as held by incarnation, moving it off any node it
// was on, so the next Choose over this snapshot sees it.
func (s *Snapshot) Place(handle, incarnation string) {
	if s.Load.total != nil {
		g, inGroup := s.groupOf(handle)
		move := func(inc string, n int) {
			if inGroup {
				s.Load.Add(inc, g.Key, n)
			} else {
				s.Load.AddUngrouped(inc, n)
			}
		}
		if cur := s.Hosts[handle]; cur != "" {
			move(cur, -1)
		}
		move(incarnation, 1)
	}
	if s.Hosts == nil {
		s.Hosts = map[string]string{}
	}
	s.Hosts[handle] = incarnation
}

// Matches reports whether n carries every label in labels with the same
// value. Extra labels on the node do not matter, and no labels match every
// node.
func Matches(n Node, labels map[string]string) bool {
	for k, v := range labels {
		got, ok := n.Labels[k]
		if !ok || got != v {
			return false
		}
	}
	return true
}

// eligible reports whether n may take seats of a group asking for labels:
// not draining and matching.
func eligible(n Node, labels map[string]string) bool {
	return !n.Draining && Matches(n, labels)
}

// matchingNodes counts the non-draining nodes that match labels.
func (s Snapshot) matchingNodes(labels map[string]string) int {
	c := 0
	for _, n := range s.Nodes {
		if eligible(n, labels) {
			c++
		}
	}
	return c
}

// Share is ceil(len(g.Seats) / number of non-draining nodes matching g); 0
// when none match. It is the most seats of g one node should hold.
func (s Snapshot) Share(g Group) int {
	m := s.matchingNodes(g.Labels)
	if m == 0 {
		return 0
	}
	return (len(g.Seats) + m - 1) / m
}

// Held returns how many seats of g node incarnation holds.
func (s Snapshot) Held(incarnation string, g Group) int {
	return s.load().held[incarnation][g.Key]
}

// groupOf returns the group handle belongs to. A handle in no group is
// treated as a group of its own that asks for no labels (false).
func (s Snapshot) groupOf(handle string) (Group, bool) {
	for _, g := range s.Groups {
		for _, h := range g.Seats {
			if h == handle {
				return g, true
			}
		}
	}
	return Group{Seats: []string{handle}}, false
}

// withinCapacity reports whether a node holding total seats may take one
// more.
func withinCapacity(n Node, total int) bool {
	return n.Capacity <= 0 || total+n.Unproven < n.Capacity
}

// candidate is a node Choose or Plan is weighing, with its load.
type candidate struct {
	node  Node
	held  int // seats of the group in question
	total int // seats of any group
}

// lessLoaded orders candidates: fewest held in the group, then fewest held in
// total, then incarnation.
func lessLoaded(a, b candidate) bool {
	if a.held != b.held {
		return a.held < b.held
	}
	if a.total != b.total {
		return a.total < b.total
	}
	return a.node.Incarnation < b.node.Incarnation
}

// excluded reports whether n is named in exclude, by incarnation or by node id.
func excluded(n Node, exclude []string) bool {
	for _, x := range exclude {
		if x != "" && (x == n.Incarnation || x == n.NodeID) {
			return true
		}
	}
	return false
}

// Choose picks the node a seat should establish on: live, not draining,
// matching the seat's group labels, not in exclude, holding fewer than its
// share of the group (not counting the seat itself if it is already counted on
// that node), within capacity (total held + Unproven < Capacity when
// Capacity > 0, again not counting the seat itself); preferring a node whose
// NodeID == preferNodeID (stickiness), then the fewest held in the group, then
// the fewest held in total, then Incarnation order (deterministic).
//
// An exclude entry names a node by incarnation or by node id. A handle that is
// in no group is placed as if it were alone in a group asking for no labels.
//
// If every matching node is at its share (can happen transiently), Choose
// falls back to the least loaded matching node that is within capacity rather
// than leaving the seat unplaced (stickiness does not apply to the fallback).
// It returns ok=false only when no live, non-draining, non-excluded node
// matches the labels or all of those are at capacity.
func (s Snapshot) Choose(handle string, exclude []string, preferNodeID string) (Node, bool) {
	g, inGroup := s.groupOf(handle)
	share := s.Share(g)
	current := s.Hosts[handle]
	load := s.load()

	var underShare, roomy []candidate
	for _, n := range s.Nodes {
		if !eligible(n, g.Labels) || excluded(n, exclude) {
			continue
		}
		// A seat alone in its group holds none of it but itself.
		c := candidate{node: n, total: load.total[n.Incarnation]}
		if inGroup {
			c.held = load.held[n.Incarnation][g.Key]
		}
		if current != "" && current == n.Incarnation {
			if inGroup {
				c.held--
			}
			c.total--
		}
		if !withinCapacity(n, c.total) {
			continue
		}
		roomy = append(roomy, c)
		if c.held < share {
			underShare = append(underShare, c)
		}
	}

	if len(underShare) > 0 {
		best := underShare[0]
		for _, c := range underShare[1:] {
			if better(c, best, preferNodeID) {
				best = c
			}
		}
		return best.node, true
	}
	if len(roomy) > 0 {
		best := roomy[0]
		for _, c := range roomy[1:] {
			if lessLoaded(c, best) {
				best = c
			}
		}
		return best.node, true
	}
	return Node{}, false
}

// Refusal says why Choose finds no node for handle: no node live, none
// carrying the group's labels, or how many of those that do are draining,
// excluded or full. Call it when Choose returned false.
func (s Snapshot) Refusal(handle string, exclude []string) string {
	if len(s.Nodes) == 0 {
		return "no node is live"
	}
	g, _ := s.groupOf(handle)
	load := s.load()
	current := s.Hosts[handle]
	var matching, draining, excludedN, full int
	for _, n := range s.Nodes {
		if !Matches(n, g.Labels) {
			continue
		}
		matching++
		total := load.total[n.Incarnation]
		if current != "" && current == n.Incarnation {
			total--
		}
		switch {
		case n.Draining:
			draining++
		case excluded(n, exclude):
			excludedN++
		case !withinCapacity(n, total):
			full++
		}
	}
	if matching == 0 {
		return fmt.Sprintf("none of the %d live nodes carries its placement labels", len(s.Nodes))
	}
	return fmt.Sprintf("of the %d live nodes with its labels, %d draining, %d excluded (they refused it or lost it), %d at capacity",
		matching, draining, excludedN, full)
}

// better orders Choose's under-share candidates: the preferred node id first,
// then lessLoaded.
func better(a, b candidate, preferNodeID string) bool {
	if preferNodeID != "" {
		ap, bp := a.node.NodeID == preferNodeID, b.node.NodeID == preferNodeID
		if ap != bp {
			return ap
		}
	}
	return lessLoaded(a, b)
}

// Move is one seat the rebalance duty asks to move off a node.
type Move struct {
	Handle string // seat to move
	From   string // incarnation it is moving off; pass it to Choose as exclude
}

// Plan returns at most maxMoves moves off nodes holding more than their share
// of a group, so a node that joined late gets its share.
//
// Groups are taken least constrained first (most matching nodes first; then
// groups with no labels before pinned ones; then by key), so when maxMoves
// cuts a pass short a pinned seat moves last. Over-share nodes are taken in
// incarnation order, and a node gives up its seats of a group in reverse of
// the group's seat order. Seats on a draining or non-live node are not moved
// (failover and drain handle them).
//
// Plan never plans a move no other node could take: each move reserves a
// target — another matching, non-draining node below its share of the group
// and within capacity — in a simulation of the moves planned before it, so
// the moves of one pass never count the same room twice. A node whose excess
// finds no target keeps it.
func (s Snapshot) Plan(maxMoves int) []Move {
	if maxMoves <= 0 {
		return nil
	}

	// Simulated hosting: seat -> incarnation, plus per-node totals.
	hosts := make(map[string]string, len(s.Hosts))
	totals := make(map[string]int)
	for h, inc := range s.Hosts {
		if inc == "" {
			continue
		}
		hosts[h] = inc
		totals[inc]++
	}

	groups := s.orderedGroups()
	nodes := s.sortedNodes()
	var moves []Move

	for _, g := range groups {
		share := s.Share(g)
		if share == 0 {
			continue
		}
		held := make(map[string]int)
		for _, h := range g.Seats {
			if inc := hosts[h]; inc != "" {
				held[inc]++
			}
		}
		for _, src := range nodes {
			if !eligible(src, g.Labels) || held[src.Incarnation] <= share {
				continue
			}
			for i := len(g.Seats) - 1; i >= 0 && held[src.Incarnation] > share; i-- {
				if len(moves) >= maxMoves {
					return moves
				}
				h := g.Seats[i]
				if hosts[h] != src.Incarnation {
					continue
				}
				var target *Node
				var best candidate
				for j := range nodes {
					t := nodes[j]
					if t.Incarnation == src.Incarnation || !eligible(t, g.Labels) {
						continue
					}
					c := candidate{node: t, held: held[t.Incarnation], total: totals[t.Incarnation]}
					if c.held >= share || !withinCapacity(t, c.total) {
						continue
					}
					if target == nil || lessLoaded(c, best) {
						target, best = &nodes[j], c
					}
				}
				if target == nil {
					break // no room anywhere for this group's excess
				}
				moves = append(moves, Move{Handle: h, From: src.Incarnation})
				hosts[h] = target.Incarnation
				held[src.Incarnation]--
				totals[src.Incarnation]--
				held[target.Incarnation]++
				totals[target.Incarnation]++
			}
		}
	}
	return moves
}

// orderedGroups returns the groups least constrained first: most matching
// non-draining nodes, then no labels before labels, then by key.
func (s Snapshot) orderedGroups() []Group {
	type ranked struct {
		g        Group
		matching int
	}
	rs := make([]ranked, len(s.Groups))
	for i, g := range s.Groups {
		rs[i] = ranked{g: g, matching: s.matchingNodes(g.Labels)}
	}
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.matching != b.matching {
			return a.matching > b.matching
		}
		if (len(a.g.Labels) == 0) != (len(b.g.Labels) == 0) {
			return len(a.g.Labels) == 0
		}
		return a.g.Key < b.g.Key
	})
	out := make([]Group, len(rs))
	for i, r := range rs {
		out[i] = r.g
	}
	return out
}

// sortedNodes returns the nodes in incarnation order.
func (s Snapshot) sortedNodes() []Node {
	out := append([]Node(nil), s.Nodes...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Incarnation < out[j].Incarnation })
	return out
}

// Unplaceable returns the seats of groups that no live non-draining node
// matches, sorted and without duplicates.
func (s Snapshot) Unplaceable() []string {
	seen := make(map[string]bool)
	var out []string
	for _, g := range s.Groups {
		if s.matchingNodes(g.Labels) > 0 {
			continue
		}
		for _, h := range g.Seats {
			if !seen[h] {
				seen[h] = true
				out = append(out, h)
			}
		}
	}
	sort.Strings(out)
	return out
}

// NodeShares returns, for one node, the share of every group it matches
// (group key -> share) — shown by GET /nodes. A draining node matches the
// same groups but its share of each is 0, since it should hold nothing. It
// returns nil when no node has that incarnation.
func (s Snapshot) NodeShares(incarnation string) map[string]int {
	for _, n := range s.Nodes {
		if n.Incarnation != incarnation {
			continue
		}
		out := make(map[string]int)
		for _, g := range s.Groups {
			if !Matches(n, g.Labels) {
				continue
			}
			if n.Draining {
				out[g.Key] = 0
			} else {
				out[g.Key] = s.Share(g)
			}
		}
		return out
	}
	return nil
}
