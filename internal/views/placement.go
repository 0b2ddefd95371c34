package views

import (
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/placement"
	"github.com/crewlet/crewlet/internal/store"
)

// Placement is the placement view of the org over the live nodes and seat
// hosts read from Postgres: what placing a seat, the rebalance duty and
// GET /nodes all reason on.
func Placement(org *config.Config, nodes []store.NodeRow, hosts map[string]string) placement.Snapshot {
	snap := placement.Snapshot{Hosts: hosts}
	for _, n := range nodes {
		snap.Nodes = append(snap.Nodes, placement.Node{
			Incarnation: n.Incarnation, NodeID: n.NodeID, HostQueue: n.HostQueue, Labels: n.Labels,
			Capacity: n.Capacity, Draining: n.Draining, Unproven: len(n.Unproven),
		})
	}
	for _, g := range org.PlacementGroups() {
		snap.Groups = append(snap.Groups, placement.Group{Key: g.Key, Labels: g.Labels, Seats: g.Seats})
	}
	return snap
}
