package crewlet

// Tenure is a seat's tenure as an activity carries it: the seat and the
// epoch it was attached at. Every activity that acts for a seat embeds it in
// its input (so its fields stay the input's "handle" and "epoch"), and the
// activity interceptor refuses the activity before it runs when the epoch is
// no longer the seat's.
type Tenure struct {
	Handle string `json:"handle"`
	Epoch  int64  `json:"epoch"`
}

// SeatTenure returns the tenure; an input that embeds Tenure answers it too,
// which is how the activity interceptor finds the tenure to check.
func (t Tenure) SeatTenure() Tenure { return t }
