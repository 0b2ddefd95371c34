package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A pause names who asks: with a token, the token's principal (the API
// refuses a token renamed, so the CLI sends no name); without one, $USER; a
// --by given is sent as it is.
func TestSignalNamesWhoAsks(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = nil
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"handle":"cto","signal":"pause"}`))
	}))
	defer srv.Close()
	t.Setenv("USER", "alice")
	for _, tc := range []struct {
		name, token string
		args        []string
		want        string
	}{
		{"no token: $USER", "", nil, "alice"},
		{"a token: its principal", "secret", nil, ""},
		{"--by as given", "secret", []string{"--by", "ops"}, "ops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CREWLET_TOKEN", tc.token)
			args := append([]string{"cto", "--api", srv.URL}, tc.args...)
			if err := runSignal(context.Background(), "pause", args, io.Discard); err != nil {
				t.Fatal(err)
			}
			if by, _ := got["by"].(string); by != tc.want {
				t.Fatalf("by = %q; want %q", by, tc.want)
			}
		})
	}
}
