package crewlet

import "context"

// Prompt is what a turn asks a model to answer.
type Prompt struct {
	Seat    string
	Role    string
	Charter string
	Trigger Message
}

// Completion is a model's answer. An empty Text means the model chose not to
// reply.
type Completion struct {
	Text string
}

// Model is a model backend (DESIGN §9).
type Model interface {
	Complete(ctx context.Context, p Prompt) (Completion, error)
}
