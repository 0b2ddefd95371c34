package api

import (
	"net/http"
	"slices"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/wire"
)

func (s *Server) spawnSeat(w http.ResponseWriter, r *http.Request) {
	var req wire.SpawnRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := crewlet.CheckID("role", req.Role); err != nil {
		writeError(w, err)
		return
	}
	if s.Spawn == nil {
		writeError(w, crewlet.Errorf(crewlet.EUNAVAILABLE, "this API process spawns no seats"))
		return
	}
	seat, err := s.Spawn.Spawn(r.Context(), req.Role, principalOf(r).Name)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, wire.SpawnedSeat{Handle: seat.Handle, Role: seat.Role})
}

func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	org := s.Org.Now()
	out := []wire.PoolView{}
	var reclaimable []string
	if s.Spawn != nil && len(org.Pools) > 0 {
		var err error
		if reclaimable, err = s.Spawn.Reclaimable(r.Context()); err != nil {
			s.logError(w, r, err)
			return
		}
	}
	for _, p := range org.Pools {
		v := wire.PoolView{Role: p.Role, MaxSeats: p.MaxSeats, IdleReapAfter: config.ShortDuration(p.IdleReapAfter), Seats: []string{}}
		for _, seat := range org.Seats {
			if seat.Spawned && seat.Role == p.Role {
				v.Seats = append(v.Seats, seat.Handle)
				if slices.Contains(reclaimable, seat.Handle) {
					v.Reclaimable++
				}
			}
		}
		v.Live = len(v.Seats)
		v.Free = max(p.MaxSeats-v.Live, 0)
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, out)
}
