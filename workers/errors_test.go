package workers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
)

// What an activity's failure may say outside the worker: deliberate errors
// and domain messages as they are, internal text never (it goes to the log
// under an id the failure names), and everything stays retryable as before.
func TestPublicError(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	internal := fmt.Errorf("read mail of cto: %w", errors.New("dial tcp 127.0.0.1:56379: connect: connection refused"))
	fenced := temporal.NewNonRetryableApplicationError("seat cto: epoch 3 is no longer current", crewlet.ErrorTypeFenced, nil)
	domain := fmt.Errorf("read turn: %w", crewlet.Wrapf(crewlet.EUNAVAILABLE, errors.New("pq: relation \"turns\" does not exist"), "the database schema is missing; run `crewlet migrate` first"))
	for _, tt := range []struct {
		name     string
		err      error
		want     string
		wantType string
	}{
		{"internal", internal, "internal error in ReadMail; the worker log has it as error_id=", crewlet.ErrorTypeInternal},
		{"deliberate", fenced, "seat cto: epoch 3 is no longer current", crewlet.ErrorTypeFenced},
		{"domain", domain, "unavailable: the database schema is missing; run `crewlet migrate` first", crewlet.EUNAVAILABLE},
		{"cancelled", context.Canceled, "context canceled", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := publicError(tt.err, crewlet.ActivityReadMail, log)
			if !strings.Contains(got.Error(), tt.want) || strings.Contains(got.Error(), "127.0.0.1") || strings.Contains(got.Error(), "pq:") {
				t.Fatalf("publicError = %q; want %q and no internal text", got, tt.want)
			}
			var appErr *temporal.ApplicationError
			if tt.wantType != "" && (!errors.As(got, &appErr) || appErr.Type() != tt.wantType || appErr.NonRetryable() != (tt.name == "deliberate")) {
				t.Fatalf("publicError = %#v; want type %s, retryable as before", got, tt.wantType)
			}
		})
	}
	if !strings.Contains(logs.String(), "connection refused") || !strings.Contains(logs.String(), "error_id=") {
		t.Fatalf("the internal text is not in the log:\n%s", logs.String())
	}
	if publicError(nil, crewlet.ActivityReadMail, log) != nil {
		t.Fatal("nil became an error")
	}
}
