package api

import (
	"net/http"
	"sort"

	"github.com/crewlet/crewlet/internal/views"
)

// NodeView is one node in GET /nodes.
type NodeView struct {
	Incarnation string            `json:"incarnation"`
	NodeID      string            `json:"node_id"`
	Labels      map[string]string `json:"labels"`
	Capacity    int               `json:"capacity"`
	// BuildID is the worker build the node runs (temporal.deployment.build_id);
	// "" for a node started before nodes recorded it.
	BuildID  string `json:"build_id"`
	Draining bool   `json:"draining"`
	Live     bool   `json:"live"`
	// SeatsHeld is the seats whose row names this node.
	SeatsHeld []string `json:"seats_held"`
	// FairShare is, per placement group the node matches, the most seats of
	// the group it should hold ("" is the group of roles with no placement).
	FairShare           map[string]int   `json:"fair_share"`
	HeartbeatAgeSeconds float64          `json:"heartbeat_age_seconds"`
	UnprovenSeconds     map[string]int64 `json:"unproven_seconds,omitempty"`
}

// NodesView is GET /nodes.
type NodesView struct {
	Nodes []NodeView `json:"nodes"`
	// Unplaceable lists seats no live node can run.
	Unplaceable []string `json:"unplaceable"`
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	live := s.Org.Now().Nodes.HeartbeatTimeout
	rows, err := s.Store.Nodes(r.Context(), live, r.URL.Query().Get("all") == "true")
	if err != nil {
		s.logError(w, r, err)
		return
	}
	hosts, _, err := s.Store.SeatHosts(r.Context())
	if err != nil {
		s.logError(w, r, err)
		return
	}
	liveRows := rows[:0:0]
	for _, n := range rows {
		if n.StoppedAt == nil && n.HeartbeatAge < live {
			liveRows = append(liveRows, n)
		}
	}
	snap := views.Placement(s.Org.Now(), liveRows, hosts)
	out := NodesView{Nodes: []NodeView{}, Unplaceable: snap.Unplaceable()}
	if out.Unplaceable == nil {
		out.Unplaceable = []string{}
	}
	for _, n := range rows {
		held := []string{}
		for seat, host := range hosts {
			if host == n.Incarnation {
				held = append(held, seat)
			}
		}
		sort.Strings(held)
		isLive := n.StoppedAt == nil && n.HeartbeatAge < live
		share := map[string]int{}
		if isLive {
			share = snap.NodeShares(n.Incarnation)
		}
		out.Nodes = append(out.Nodes, NodeView{
			Incarnation: n.Incarnation, NodeID: n.NodeID, Labels: n.Labels, Capacity: n.Capacity, BuildID: n.BuildID,
			Draining: n.Draining, Live: isLive, SeatsHeld: held, FairShare: share,
			HeartbeatAgeSeconds: n.HeartbeatAge.Seconds(), UnprovenSeconds: n.Unproven,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// DrainNodeResponse answers POST /nodes/{id}/drain.
type DrainNodeResponse struct {
	Draining []string `json:"draining"`
}

// drainNode marks a node (an incarnation, or every live incarnation of a
// node id) draining; the node notices on its next beat, moves its seats off
// and exits.
func (s *Server) drainNode(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	marked, err := s.Store.SetNodeDraining(r.Context(), id, s.Org.Now().Nodes.HeartbeatTimeout)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, DrainNodeResponse{Draining: marked})
}
