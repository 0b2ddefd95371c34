package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/internal/config"
)

func TestLevelFormatAndRequestID(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log, err := New(&out, config.Log{Format: config.LogJSON, Level: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithRequestID(context.Background(), "req-1")
	log.InfoContext(ctx, "below_the_level")
	log.With("seat", "cto").WarnContext(ctx, "kept", "n", 1)
	log.Warn("outside_a_request")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("wrote %d lines at level warn: %q; want 2 (the info line dropped)", len(lines), out.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("line %q: %v", lines[0], err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatalf("line %q: %v", lines[1], err)
	}
	if first["msg"] != "kept" || first["request_id"] != "req-1" || first["seat"] != "cto" {
		t.Fatalf("line in a request: %v; want msg kept, request_id req-1, seat cto", first)
	}
	if _, ok := second["request_id"]; ok {
		t.Fatalf("line outside a request: %v; want no request_id", second)
	}

	out.Reset()
	text, err := New(&out, config.Log{Format: config.LogText, Level: "debug"})
	if err != nil {
		t.Fatal(err)
	}
	text.DebugContext(ctx, "seen")
	if got := out.String(); !strings.Contains(got, "msg=seen") || !strings.Contains(got, "request_id=req-1") {
		t.Fatalf("text line %q; want msg=seen and request_id=req-1", got)
	}

	if _, err := New(&out, config.Log{Format: config.LogText, Level: "loud"}); err == nil {
		t.Fatal("New with level loud: nil error; want the levels named")
	}
}
