package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/crewlet/crewlet/internal/config"
)

// A pause names who asks: with a token, the token's principal (the API
// refuses a token renamed, so the CLI sends no name); without one, or with
// the local token of the API on this machine, $USER; a --by given is sent
// as it is.
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
		local       bool
		args        []string
		want        string
	}{
		{"no token: $USER", "", false, nil, "alice"},
		{"the local token: $USER", "", true, nil, "alice"},
		{"a token: its principal", "secret", false, nil, ""},
		{"--by as given", "secret", false, []string{"--by", "ops"}, "ops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			t.Setenv("CREWLET_TOKEN", tc.token)
			if tc.local {
				u, err := url.Parse(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				path, err := config.LocalTokenPath(u.Port())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := mintLocalToken(path); err != nil {
					t.Fatal(err)
				}
			}
			args := append([]string{"pause", "cto", "--api", srv.URL}, tc.args...)
			if err := run(context.Background(), args, io.Discard, io.Discard); err != nil {
				t.Fatal(err)
			}
			if by, _ := got["by"].(string); by != tc.want {
				t.Fatalf("by = %q; want %q", by, tc.want)
			}
		})
	}
}
