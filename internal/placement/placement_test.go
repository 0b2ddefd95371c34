package placement

import (
	"fmt"
	"reflect"
	"testing"
)

// seats returns n handles "prefix-00", "prefix-01", ...
func seats(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

// hostAll maps every handle to incarnation.
func hostAll(hosts map[string]string, handles []string, inc string) map[string]string {
	if hosts == nil {
		hosts = make(map[string]string)
	}
	for _, h := range handles {
		hosts[h] = inc
	}
	return hosts
}

func node(id string, labels map[string]string) Node {
	return Node{Incarnation: id + ":a", NodeID: id, HostQueue: "host-" + id, Labels: labels}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	n := node("n1", map[string]string{"tools": "git", "gpu": "yes"})
	tests := []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"no labels", nil, true},
		{"empty labels", map[string]string{}, true},
		{"subset", map[string]string{"tools": "git"}, true},
		{"exact", map[string]string{"tools": "git", "gpu": "yes"}, true},
		{"wrong value", map[string]string{"tools": "svn"}, false},
		{"missing key", map[string]string{"zone": "eu"}, false},
		{"superset of node", map[string]string{"tools": "git", "gpu": "yes", "zone": "eu"}, false},
	}
	for _, tt := range tests {
		if got := Matches(n, tt.labels); got != tt.want {
			t.Errorf("%s: Matches(%v) = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

func TestShare(t *testing.T) {
	t.Parallel()
	g := Group{Seats: seats("s", 20)}
	pinned := Group{Key: "gpu=yes", Labels: map[string]string{"gpu": "yes"}, Seats: seats("p", 3)}
	n1, n2, n3 := node("n1", nil), node("n2", nil), node("n3", map[string]string{"gpu": "yes"})
	drain := n3
	drain.Draining = true
	tests := []struct {
		name  string
		nodes []Node
		group Group
		want  int
	}{
		{"two nodes", []Node{n1, n2}, g, 10},
		{"third node", []Node{n1, n2, n3}, g, 7},
		{"one node", []Node{n1}, g, 20},
		{"no nodes", nil, g, 0},
		{"draining counts nothing", []Node{n1, n2, drain}, g, 10},
		{"pinned, one match", []Node{n1, n2, n3}, pinned, 3},
		{"pinned, only match draining", []Node{n1, n2, drain}, pinned, 0},
		{"pinned, no match", []Node{n1, n2}, pinned, 0},
		{"empty group", []Node{n1, n2}, Group{}, 0},
	}
	for _, tt := range tests {
		s := Snapshot{Nodes: tt.nodes, Groups: []Group{tt.group}}
		if got := s.Share(tt.group); got != tt.want {
			t.Errorf("%s: Share = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestHeld(t *testing.T) {
	t.Parallel()
	g := Group{Seats: []string{"a", "b", "c", "d"}}
	s := Snapshot{
		Nodes:  []Node{node("n1", nil), node("n2", nil)},
		Groups: []Group{g},
		Hosts:  map[string]string{"a": "n1:a", "b": "n1:a", "c": "n2:a", "d": "", "other": "n1:a"},
	}
	tests := []struct {
		inc  string
		want int
	}{{"n1:a", 2}, {"n2:a", 1}, {"n3:a", 0}, {"", 0}}
	for _, tt := range tests {
		if got := s.Held(tt.inc, g); got != tt.want {
			t.Errorf("Held(%q) = %d, want %d", tt.inc, got, tt.want)
		}
	}
}

func TestChoose(t *testing.T) {
	t.Parallel()
	all := seats("s", 4)
	g := Group{Seats: all}
	gpu := map[string]string{"gpu": "yes"}
	pinned := Group{Key: "gpu=yes", Labels: gpu, Seats: []string{"p"}}

	n1, n2, n3 := node("n1", nil), node("n2", nil), node("n3", gpu)
	n1new := n1
	n1new.Incarnation = "n1:b" // same node, restarted
	n2drain := n2
	n2drain.Draining = true
	capped := func(n Node, capacity, unproven int) Node {
		n.Capacity, n.Unproven = capacity, unproven
		return n
	}

	tests := []struct {
		name    string
		s       Snapshot
		handle  string
		exclude []string
		prefer  string
		want    string // incarnation, "" for ok=false
	}{
		{
			name:   "least loaded in group",
			s:      Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{g}, Hosts: map[string]string{"s-00": "n1:a"}},
			handle: "s-01",
			want:   "n2:a",
		},
		{
			name:   "tie broken by incarnation",
			s:      Snapshot{Nodes: []Node{n2, n1}, Groups: []Group{g}},
			handle: "s-00",
			want:   "n1:a",
		},
		{
			name:   "tie in group broken by total",
			s:      Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{g, pinned}, Hosts: map[string]string{"p": "n1:a", "x": "n1:a"}},
			handle: "s-00",
			want:   "n2:a",
		},
		{
			name:   "stickiness beats load, new incarnation",
			s:      Snapshot{Nodes: []Node{n1new, n2}, Groups: []Group{g}, Hosts: map[string]string{"s-00": "n1:b"}},
			handle: "s-01",
			prefer: "n1",
			want:   "n1:b",
		},
		{
			name:   "stickiness does not beat share",
			s:      Snapshot{Nodes: []Node{n1new, n2}, Groups: []Group{g}, Hosts: map[string]string{"s-00": "n1:b", "s-01": "n1:b"}},
			handle: "s-02",
			prefer: "n1",
			want:   "n2:a",
		},
		{
			name:   "seat itself not counted on its node",
			s:      Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{g}, Hosts: map[string]string{"s-00": "n1:a", "s-01": "n1:a", "s-02": "n2:a"}},
			handle: "s-01",
			prefer: "n1",
			want:   "n1:a",
		},
		{
			name:    "exclude by incarnation",
			s:       Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{g}},
			handle:  "s-00",
			exclude: []string{"n1:a"},
			want:    "n2:a",
		},
		{
			name:    "exclude by node id beats stickiness",
			s:       Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{g}},
			handle:  "s-00",
			exclude: []string{"n1"},
			prefer:  "n1",
			want:    "n2:a",
		},
		{
			name:    "everything excluded",
			s:       Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{g}},
			handle:  "s-00",
			exclude: []string{"n1:a", "n2"},
			want:    "",
		},
		{
			name:   "draining gets nothing even when preferred",
			s:      Snapshot{Nodes: []Node{n1, n2drain}, Groups: []Group{g}, Hosts: hostAll(nil, all[:3], "n1:a")},
			handle: "s-03",
			prefer: "n2",
			want:   "n1:a",
		},
		{
			name:   "pinned goes to matching node only",
			s:      Snapshot{Nodes: []Node{n1, n2, n3}, Groups: []Group{g, pinned}, Hosts: map[string]string{"p": ""}},
			handle: "p",
			prefer: "n1",
			want:   "n3:a",
		},
		{
			name:   "pinned with no matching node",
			s:      Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{g, pinned}},
			handle: "p",
			want:   "",
		},
		{
			name:   "at share everywhere falls back to least loaded",
			s:      Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{{Seats: all}}, Hosts: map[string]string{"s-00": "n1:a", "s-01": "n1:a", "s-02": "n2:a", "s-03": "n2:a", "x": "n1:a"}},
			handle: "new",
			want:   "n2:a",
		},
		{
			name:    "moving off, every other node at share, falls back",
			s:       Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{{Seats: all[:3]}}, Hosts: map[string]string{"s-00": "n1:a", "s-01": "n1:a", "s-02": "n2:a"}},
			handle:  "s-02",
			exclude: []string{"n2:a"},
			want:    "n1:a",
		},
		{
			name: "fallback picks the least loaded",
			s: Snapshot{
				Nodes:  []Node{n1, n2, node("n4", nil)},
				Groups: []Group{{Seats: []string{"a", "b", "c", "d", "e"}}},
				Hosts:  map[string]string{"a": "n1:a", "b": "n1:a", "c": "n2:a", "d": "n2:a", "e": "n4:a", "y": "n1:a"},
			},
			handle:  "e",
			exclude: []string{"n4"},
			prefer:  "n1",
			want:    "n2:a",
		},
		{
			name:    "fallback respects capacity",
			s:       Snapshot{Nodes: []Node{capped(n1, 2, 0), n2}, Groups: []Group{{Seats: all[:3]}}, Hosts: map[string]string{"s-00": "n1:a", "s-01": "n1:a", "s-02": "n2:a"}},
			handle:  "s-02",
			exclude: []string{"n2:a"},
			want:    "",
		},
		{
			name:   "capacity full",
			s:      Snapshot{Nodes: []Node{capped(n1, 2, 0), n2}, Groups: []Group{g}, Hosts: map[string]string{"x": "n1:a", "y": "n1:a"}},
			handle: "s-00",
			prefer: "n1",
			want:   "n2:a",
		},
		{
			name:   "unproven counts against capacity",
			s:      Snapshot{Nodes: []Node{capped(n1, 2, 1), n2}, Groups: []Group{g}, Hosts: map[string]string{"x": "n1:a"}},
			handle: "s-00",
			prefer: "n1",
			want:   "n2:a",
		},
		{
			name:   "below capacity with unproven",
			s:      Snapshot{Nodes: []Node{capped(n1, 3, 1), n2}, Groups: []Group{g}, Hosts: map[string]string{"x": "n1:a"}},
			handle: "s-00",
			prefer: "n1",
			want:   "n1:a",
		},
		{
			name:   "seat itself not counted against capacity",
			s:      Snapshot{Nodes: []Node{capped(n1, 2, 1), n2}, Groups: []Group{g}, Hosts: map[string]string{"s-00": "n1:a"}},
			handle: "s-00",
			prefer: "n1",
			want:   "n1:a",
		},
		{
			name:   "all at capacity",
			s:      Snapshot{Nodes: []Node{capped(n1, 1, 1), capped(n2, 1, 0)}, Groups: []Group{g}, Hosts: map[string]string{"x": "n2:a"}},
			handle: "s-00",
			want:   "",
		},
		{
			name:   "no nodes",
			s:      Snapshot{Groups: []Group{g}},
			handle: "s-00",
			want:   "",
		},
	}
	for _, tt := range tests {
		got, ok := tt.s.Choose(tt.handle, tt.exclude, tt.prefer)
		gotInc := ""
		if ok {
			gotInc = got.Incarnation
		}
		if gotInc != tt.want || ok != (tt.want != "") {
			t.Errorf("%s: Choose(%q, %v, %q) = %q, %v; want %q", tt.name, tt.handle, tt.exclude, tt.prefer, gotInc, ok, tt.want)
		}
	}
}

func TestUnplaceable(t *testing.T) {
	t.Parallel()
	gpu := map[string]string{"gpu": "yes"}
	g := Group{Seats: []string{"a", "b"}}
	pinned := Group{Key: "gpu=yes", Labels: gpu, Seats: []string{"p2", "p1"}}
	zone := Group{Key: "zone=eu", Labels: map[string]string{"zone": "eu"}, Seats: []string{"z"}}
	drainGPU := node("n3", gpu)
	drainGPU.Draining = true
	tests := []struct {
		name  string
		nodes []Node
		want  []string
	}{
		{"pinned and zone unmatched", []Node{node("n1", nil)}, []string{"p1", "p2", "z"}},
		{"only draining matches", []Node{node("n1", nil), drainGPU}, []string{"p1", "p2", "z"}},
		{"gpu node live", []Node{node("n1", nil), node("n3", gpu)}, []string{"z"}},
		{"no nodes", nil, []string{"a", "b", "p1", "p2", "z"}},
		{"all matched", []Node{node("n1", map[string]string{"gpu": "yes", "zone": "eu"})}, nil},
	}
	for _, tt := range tests {
		s := Snapshot{Nodes: tt.nodes, Groups: []Group{g, pinned, zone}}
		if got := s.Unplaceable(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Unplaceable = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestNodeShares(t *testing.T) {
	t.Parallel()
	gpu := map[string]string{"gpu": "yes"}
	g := Group{Seats: seats("s", 20)}
	pinned := Group{Key: "gpu=yes", Labels: gpu, Seats: seats("p", 3)}
	drain := node("n4", gpu)
	drain.Draining = true
	s := Snapshot{Nodes: []Node{node("n1", nil), node("n2", nil), node("n3", gpu), drain}, Groups: []Group{g, pinned}}
	tests := []struct {
		inc  string
		want map[string]int
	}{
		{"n1:a", map[string]int{"": 7}},
		{"n3:a", map[string]int{"": 7, "gpu=yes": 3}},
		{"n4:a", map[string]int{"": 0, "gpu=yes": 0}},
		{"nope:a", nil},
	}
	for _, tt := range tests {
		if got := s.NodeShares(tt.inc); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("NodeShares(%q) = %v, want %v", tt.inc, got, tt.want)
		}
	}
}

// apply carries out moves the way the rebalance duty and the seat workflows
// would: every moved seat releases, then each re-establishes through Choose,
// excluding the node it left and preferring nothing. It fails the test when a
// move cannot be placed, lands on the node it left, or lands on a node that was
// already at its share of the seat's group.
func apply(t *testing.T, s *Snapshot, moves []Move) {
	t.Helper()
	for _, m := range moves {
		if s.Hosts[m.Handle] != m.From {
			t.Fatalf("move %v: seat is on %q, not %q", m, s.Hosts[m.Handle], m.From)
		}
		s.Hosts[m.Handle] = ""
	}
	for _, m := range moves {
		g, _ := s.groupOf(m.Handle)
		n, ok := s.Choose(m.Handle, []string{m.From}, "")
		if !ok {
			t.Fatalf("move %v: Choose found no node", m)
		}
		if n.Incarnation == m.From {
			t.Fatalf("move %v: Choose put it back on %q", m, n.Incarnation)
		}
		if held, share := s.Held(n.Incarnation, g), s.Share(g); held >= share {
			t.Fatalf("move %v: Choose picked %q already at share (%d >= %d)", m, n.Incarnation, held, share)
		}
		s.Hosts[m.Handle] = n.Incarnation
	}
}

// checkHosted fails unless every handle is hosted exactly once on a node of s.
func checkHosted(t *testing.T, s Snapshot, handles []string) {
	t.Helper()
	live := make(map[string]bool)
	for _, n := range s.Nodes {
		live[n.Incarnation] = true
	}
	if len(s.Hosts) != len(handles) {
		t.Fatalf("hosts has %d seats, want %d", len(s.Hosts), len(handles))
	}
	for _, h := range handles {
		if !live[s.Hosts[h]] {
			t.Fatalf("seat %q on %q, not a live node", h, s.Hosts[h])
		}
	}
}

func TestPlanConvergesAfterJoin(t *testing.T) {
	t.Parallel()
	all := seats("s", 20)
	s := Snapshot{
		Nodes:  []Node{node("n1", nil)},
		Groups: []Group{{Seats: all}},
		Hosts:  hostAll(nil, all, "n1:a"),
	}
	if moves := s.Plan(4); len(moves) != 0 {
		t.Fatalf("alone: Plan = %v, want none", moves)
	}
	s.Nodes = append(s.Nodes, node("n2", nil))

	const maxMoves = 4
	maxPasses := (10+maxMoves-1)/maxMoves + 1
	passes := 0
	for {
		moves := s.Plan(maxMoves)
		if len(moves) == 0 {
			break
		}
		if len(moves) > maxMoves {
			t.Fatalf("pass %d: %d moves, want at most %d", passes+1, len(moves), maxMoves)
		}
		passes++
		if passes > maxPasses {
			t.Fatalf("no convergence within %d passes: n1=%d n2=%d", maxPasses, s.Held("n1:a", s.Groups[0]), s.Held("n2:a", s.Groups[0]))
		}
		apply(t, &s, moves)
		checkHosted(t, s, all)
	}
	for _, inc := range []string{"n1:a", "n2:a"} {
		if got := s.Held(inc, s.Groups[0]); got < 9 || got > 11 {
			t.Errorf("after %d passes %s holds %d, want 10±1", passes, inc, got)
		}
	}
	if passes == 0 {
		t.Errorf("Plan never moved anything after n2 joined")
	}
}

func TestPlanThirdNodeWithPinned(t *testing.T) {
	t.Parallel()
	gpu := map[string]string{"gpu": "yes"}
	plain := Group{Seats: seats("s", 20)}
	pinned := Group{Key: "gpu=yes", Labels: gpu, Seats: seats("p", 4)}
	all := append(append([]string(nil), plain.Seats...), pinned.Seats...)
	s := Snapshot{
		Nodes:  []Node{node("n1", gpu)},
		Groups: []Group{pinned, plain},
		Hosts:  hostAll(nil, all, "n1:a"),
	}
	s.Nodes = append(s.Nodes, node("n2", nil), node("n3", gpu))
	for pass := 0; ; pass++ {
		if pass > 10 {
			t.Fatalf("no convergence in 10 passes")
		}
		moves := s.Plan(3)
		if len(moves) == 0 {
			break
		}
		apply(t, &s, moves)
		checkHosted(t, s, all)
	}
	for _, g := range s.Groups {
		for _, n := range s.Nodes {
			if !Matches(n, g.Labels) {
				if held := s.Held(n.Incarnation, g); held != 0 {
					t.Errorf("group %q: %s holds %d, matches nothing", g.Key, n.Incarnation, held)
				}
				continue
			}
			if held, share := s.Held(n.Incarnation, g), s.Share(g); held > share {
				t.Errorf("group %q: %s holds %d, share %d", g.Key, n.Incarnation, held, share)
			}
		}
	}
}

func TestPlanOrder(t *testing.T) {
	t.Parallel()
	gpu := map[string]string{"gpu": "yes"}
	plain := Group{Key: "", Seats: seats("s", 10)}
	pinned := Group{Key: "gpu=yes", Labels: gpu, Seats: seats("p", 4)}
	// wide matches three nodes, narrow two: wide goes first even though labelled.
	wide := Group{Key: "tools=git", Labels: map[string]string{"tools": "git"}, Seats: seats("w", 6)}
	narrow := Group{Key: "gpu=yes", Labels: gpu, Seats: seats("q", 4)}

	both := map[string]string{"gpu": "yes", "tools": "git"}
	tests := []struct {
		name     string
		s        Snapshot
		maxMoves int
		want     []Move
	}{
		{
			name: "unlabelled before pinned when cut short",
			s: Snapshot{
				Nodes:  []Node{node("n1", gpu), node("n2", gpu)},
				Groups: []Group{pinned, plain},
				Hosts:  hostAll(hostAll(nil, plain.Seats, "n1:a"), pinned.Seats, "n1:a"),
			},
			maxMoves: 4,
			want: []Move{
				{"s-09", "n1:a"}, {"s-08", "n1:a"}, {"s-07", "n1:a"}, {"s-06", "n1:a"},
			},
		},
		{
			name: "pinned last when room remains",
			s: Snapshot{
				Nodes:  []Node{node("n1", gpu), node("n2", gpu)},
				Groups: []Group{pinned, plain},
				Hosts:  hostAll(hostAll(nil, plain.Seats, "n1:a"), pinned.Seats, "n1:a"),
			},
			maxMoves: 7,
			want: []Move{
				{"s-09", "n1:a"}, {"s-08", "n1:a"}, {"s-07", "n1:a"}, {"s-06", "n1:a"}, {"s-05", "n1:a"},
				{"p-03", "n1:a"}, {"p-02", "n1:a"},
			},
		},
		{
			name: "most matching nodes first",
			s: Snapshot{
				Nodes:  []Node{node("n1", both), node("n2", both), node("n3", map[string]string{"tools": "git"})},
				Groups: []Group{narrow, wide},
				Hosts:  hostAll(hostAll(nil, wide.Seats, "n1:a"), narrow.Seats, "n1:a"),
			},
			maxMoves: 4,
			want: []Move{
				{"w-05", "n1:a"}, {"w-04", "n1:a"}, {"w-03", "n1:a"}, {"w-02", "n1:a"},
			},
		},
		{
			name: "zero budget",
			s: Snapshot{
				Nodes:  []Node{node("n1", nil), node("n2", nil)},
				Groups: []Group{plain},
				Hosts:  hostAll(nil, plain.Seats, "n1:a"),
			},
			maxMoves: 0,
			want:     nil,
		},
	}
	for _, tt := range tests {
		if got := tt.s.Plan(tt.maxMoves); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Plan(%d) = %v, want %v", tt.name, tt.maxMoves, got, tt.want)
		}
	}
}

func TestPlanNoMove(t *testing.T) {
	t.Parallel()
	gpu := map[string]string{"gpu": "yes"}
	plain := Group{Seats: seats("s", 20)}
	pinned := Group{Key: "gpu=yes", Labels: gpu, Seats: seats("p", 3)}
	n1, n2 := node("n1", nil), node("n2", nil)
	n2drain := n2
	n2drain.Draining = true
	n2full := n2
	n2full.Capacity, n2full.Unproven = 5, 2

	split := hostAll(hostAll(nil, plain.Seats[:10], "n1:a"), plain.Seats[10:], "n2:a")
	odd := Group{Seats: seats("o", 21)}
	uneven := hostAll(hostAll(nil, odd.Seats[:11], "n1:a"), odd.Seats[11:], "n2:a")
	tests := []struct {
		name string
		s    Snapshot
	}{
		{"every node at share", Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{plain}, Hosts: split}},
		{"one over, other at share", Snapshot{
			Nodes:  []Node{n1, n2, node("n3", nil)},
			Groups: []Group{plain},
			Hosts:  hostAll(hostAll(hostAll(nil, plain.Seats[:7], "n1:a"), plain.Seats[7:14], "n2:a"), plain.Seats[14:], "n3:a"),
		}},
		{"odd group, 11 and 10 of share 11", Snapshot{Nodes: []Node{n1, n2}, Groups: []Group{odd}, Hosts: uneven}},
		{"seats on draining node stay", Snapshot{Nodes: []Node{n1, n2drain}, Groups: []Group{plain}, Hosts: split}},
		{"seats on draining node over share stay", Snapshot{
			Nodes:  []Node{n1, n2drain, node("n3", nil)},
			Groups: []Group{plain},
			Hosts:  hostAll(hostAll(nil, plain.Seats[:5], "n1:a"), plain.Seats[5:], "n2:a"),
		}},
		{"only under-share node full, other at share", Snapshot{
			Nodes:  []Node{n1, node("n3", nil), func() Node { n := node("n4", nil); n.Capacity = 5; return n }()},
			Groups: []Group{plain},
			Hosts:  hostAll(hostAll(hostAll(nil, plain.Seats[:8], "n1:a"), plain.Seats[8:15], "n3:a"), plain.Seats[15:], "n4:a"),
		}},
		{"seats on dead node stay", Snapshot{Nodes: []Node{n1}, Groups: []Group{plain}, Hosts: split}},
		{"only target draining", Snapshot{Nodes: []Node{n1, n2drain}, Groups: []Group{plain}, Hosts: hostAll(nil, plain.Seats, "n1:a")}},
		{"only target full", Snapshot{
			Nodes:  []Node{n1, n2full},
			Groups: []Group{plain},
			Hosts:  hostAll(hostAll(nil, plain.Seats[:17], "n1:a"), plain.Seats[17:], "n2:a"),
		}},
		{"pinned, other match full, non-matching node idle", Snapshot{
			Nodes:  []Node{node("n1", gpu), n2, func() Node { n := node("n3", gpu); n.Capacity, n.Unproven = 1, 1; return n }()},
			Groups: []Group{pinned},
			Hosts:  hostAll(nil, pinned.Seats, "n1:a"),
		}},
		{"pinned, no other match", Snapshot{
			Nodes:  []Node{node("n1", gpu), n2},
			Groups: []Group{pinned},
			Hosts:  hostAll(nil, pinned.Seats, "n1:a"),
		}},
	}
	for _, tt := range tests {
		if got := tt.s.Plan(100); len(got) != 0 {
			t.Errorf("%s: Plan = %v, want none", tt.name, got)
		}
	}
}

func TestPlanRespectsTargetRoom(t *testing.T) {
	t.Parallel()
	// n2 has room for one more seat by capacity, though its share is 10:
	// Plan must stop at what n2 can take, and Choose must place every move.
	plain := Group{Seats: seats("s", 20)}
	n2 := node("n2", nil)
	n2.Capacity, n2.Unproven = 3, 1
	s := Snapshot{
		Nodes:  []Node{node("n1", nil), n2},
		Groups: []Group{plain},
		Hosts:  hostAll(hostAll(nil, plain.Seats[:19], "n1:a"), plain.Seats[19:], "n2:a"),
	}
	moves := s.Plan(4)
	if len(moves) != 1 {
		t.Fatalf("Plan = %v, want exactly 1 move", moves)
	}
	apply(t, &s, moves)
	if got := s.Plan(4); len(got) != 0 {
		t.Errorf("second pass Plan = %v, want none (n2 full)", got)
	}

	// n1 is 2 over its share of 7; n2 has room for 1 in the share, n3 has
	// room in the share but none in capacity. One move, not two.
	n3 := node("n3", nil)
	n3.Capacity = 5
	s = Snapshot{
		Nodes:  []Node{node("n1", nil), node("n2", nil), n3},
		Groups: []Group{plain},
		Hosts:  hostAll(hostAll(hostAll(nil, plain.Seats[:9], "n1:a"), plain.Seats[9:15], "n2:a"), plain.Seats[15:], "n3:a"),
	}
	moves = s.Plan(4)
	if len(moves) != 1 {
		t.Fatalf("room counted twice: Plan = %v, want exactly 1 move", moves)
	}
	apply(t, &s, moves)

	// Every move of a larger mixed fleet is one Choose can place.
	gpu := map[string]string{"gpu": "yes"}
	pinned := Group{Key: "gpu=yes", Labels: gpu, Seats: seats("p", 6)}
	all := append(append([]string(nil), plain.Seats...), pinned.Seats...)
	n4 := node("n4", gpu)
	n4.Capacity = 8 // exactly its share of both groups
	s = Snapshot{
		Nodes:  []Node{node("n1", gpu), node("n2", nil), node("n3", nil), n4},
		Groups: []Group{plain, pinned},
		Hosts:  hostAll(nil, all, "n1:a"),
	}
	for pass := 0; pass < 20; pass++ {
		moves := s.Plan(5)
		if len(moves) == 0 {
			break
		}
		apply(t, &s, moves)
		checkHosted(t, s, all)
	}
	if got := s.Plan(5); len(got) != 0 {
		t.Errorf("no convergence in 20 passes: still planning %v", got)
	}
	if got := s.load().total["n4:a"]; got > 8 {
		t.Errorf("n4 holds %d seats, capacity 8", got)
	}
	for _, g := range s.Groups {
		for _, n := range s.Nodes {
			if held, share := s.Held(n.Incarnation, g), s.Share(g); held > share {
				t.Errorf("group %q: %s holds %d, share %d", g.Key, n.Incarnation, held, share)
			}
		}
	}
}

// A placement given the load counted elsewhere (the database, per node and
// group) and only the placed seat's own host chooses as one that counts
// every seat's host; and Place keeps that load true for the next choice,
// so seats chosen one after another over one snapshot share the nodes out
// as if each had a fresh one.
func TestChooseOnAGivenLoadMatchesCountingEveryHost(t *testing.T) {
	t.Parallel()
	plain := Group{Seats: seats("s", 30)}
	pinned := Group{Key: "gpu=yes", Labels: map[string]string{"gpu": "yes"}, Seats: seats("p", 6)}
	n1, n2, n3 := node("n1", nil), node("n2", nil), node("n3", map[string]string{"gpu": "yes"})
	n3.Capacity = 12
	nodes := []Node{n1, n2, n3}
	groups := []Group{plain, pinned}
	hosts := hostAll(nil, plain.Seats[:12], n1.Incarnation)
	hostAll(hosts, plain.Seats[12:16], n2.Incarnation)
	hostAll(hosts, pinned.Seats[:2], n3.Incarnation)
	hosts["gone"] = n2.Incarnation // a seat no longer in the org

	full := Snapshot{Nodes: nodes, Groups: groups, Hosts: hosts}
	given := Snapshot{Nodes: nodes, Groups: groups, Hosts: map[string]string{}, Load: LoadOf(groups, hosts)}
	var toPlace []string
	toPlace = append(toPlace, plain.Seats[16:]...)
	toPlace = append(toPlace, pinned.Seats[2:]...)
	toPlace = append(toPlace, plain.Seats[0]) // one already held, placed again
	for _, h := range toPlace {
		given.Hosts[h] = hosts[h]
		want, wantOK := full.Choose(h, nil, "")
		got, ok := given.Choose(h, nil, "")
		if got.Incarnation != want.Incarnation || ok != wantOK {
			t.Fatalf("Choose(%s) on the given load = %s %v; counting every host = %s %v", h, got.Incarnation, ok, want.Incarnation, wantOK)
		}
		if ok {
			full.Place(h, want.Incarnation)
			given.Place(h, got.Incarnation)
		}
	}
	for _, n := range nodes {
		for _, g := range groups {
			if got, want := given.Held(n.Incarnation, g), full.Held(n.Incarnation, g); got != want {
				t.Errorf("%s holds %d of group %q on the given load, %d counting every host", n.Incarnation, got, g.Key, want)
			}
		}
	}
	if got := full.Held(n3.Incarnation, plain) + full.Held(n3.Incarnation, pinned); got > n3.Capacity {
		t.Errorf("n3 holds %d seats, capacity %d", got, n3.Capacity)
	}
	// n1 held 12 plain seats, over its share of 10: it takes none of the
	// new ones, and the one of its own placed again moves off it.
	if got := full.Held(n1.Incarnation, plain); got != 11 {
		t.Errorf("n1 holds %d plain seats; want 11", got)
	}
}

// When Choose finds no node, Refusal says which of its reasons held, so a
// seat's last_error tells an operator what to change.
func TestRefusalSaysWhyNoNodeTakesTheSeat(t *testing.T) {
	t.Parallel()
	gpu := map[string]string{"gpu": "yes"}
	pinned := Group{Key: "gpu=yes", Labels: gpu, Seats: []string{"p", "q"}}
	plain := node("n1", nil)
	g1, g2, g3 := node("g1", gpu), node("g2", gpu), node("g3", gpu)
	g2.Draining = true
	g3.Capacity = 1
	for _, tc := range []struct {
		name    string
		nodes   []Node
		exclude []string
		want    string
	}{
		{"no node live", nil, nil, "no node is live"},
		{"none with the labels", []Node{plain}, nil, "none of the 1 live nodes carries its placement labels"},
		{"draining, excluded and full", []Node{plain, g1, g2, g3}, []string{"g1"},
			"of the 3 live nodes with its labels, 1 draining, 1 excluded (they refused it or lost it), 1 at capacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Snapshot{Nodes: tc.nodes, Groups: []Group{pinned}, Hosts: map[string]string{"q": "g3:a"}}
			if n, ok := s.Choose("p", tc.exclude, ""); ok {
				t.Fatalf("Choose placed p on %s; the case needs a refusal", n.Incarnation)
			}
			if got := s.Refusal("p", tc.exclude); got != tc.want {
				t.Errorf("Refusal: got %q, want %q", got, tc.want)
			}
		})
	}
}
