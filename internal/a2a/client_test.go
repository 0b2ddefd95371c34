package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/internal/a2a"
)

const remoteToken = "s3cret-token-never-shown"

// remoteCard serves a card whose interfaces interfaces(base) names, to
// requests that carry the token.
func remoteCard(t *testing.T, interfaces func(base string) []a2a.AgentInterface) *httptest.Server {
	t.Helper()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+remoteToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(a2a.AgentCard{Name: "remote", SupportedInterfaces: interfaces(srv.URL), Capabilities: a2a.AgentCapabilities{Streaming: true}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// What a user can get wrong about a remote agent fails with words that
// say what and what to do, never the token, and says whether asking
// again could help.
func TestDialingARemoteAgentSaysWhatIsWrongWithoutTheToken(t *testing.T) {
	t.Parallel()
	jsonrpc := func(base string) []a2a.AgentInterface {
		return []a2a.AgentInterface{{URL: base + "/rpc", ProtocolBinding: a2a.BindingJSONRPC, ProtocolVersion: a2a.ProtocolVersion}}
	}
	for _, tc := range []struct {
		name, token string
		interfaces  func(base string) []a2a.AgentInterface
		refused     bool
		says        string
	}{
		{"a wrong token", "wrong", jsonrpc, true, "refused crewlet's credentials (HTTP 401): check the token in the agent's token_env"},
		{"no JSON-RPC interface", remoteToken, func(base string) []a2a.AgentInterface {
			return []a2a.AgentInterface{{URL: base + "/grpc", ProtocolBinding: "GRPC"}}
		}, true, "offers no JSONRPC interface (it offers: GRPC); crewlet speaks A2A over JSON-RPC only"},
		{"an interface on another host", remoteToken, func(string) []a2a.AgentInterface {
			return []a2a.AgentInterface{{URL: "https://elsewhere.example.com/rpc", ProtocolBinding: a2a.BindingJSONRPC}}
		}, true, "not on the card's own origin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := remoteCard(t, tc.interfaces)
			_, err := a2a.Dial(context.Background(), srv.Client(), srv.URL+a2a.CardPath, tc.token)
			var re *a2a.RemoteError
			if !errors.As(err, &re) || re.Refused != tc.refused || !strings.Contains(re.Msg, tc.says) {
				t.Fatalf("Dial: %v; want a RemoteError (refused %v) saying %q", err, tc.refused, tc.says)
			}
			if strings.Contains(re.Msg, remoteToken) || strings.Contains(re.Msg, tc.token) {
				t.Fatalf("the error shows the token: %s", re.Msg)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		srv := remoteCard(t, jsonrpc)
		url := srv.URL + a2a.CardPath
		srv.Close()
		_, err := a2a.Dial(context.Background(), http.DefaultClient, url, remoteToken)
		var re *a2a.RemoteError
		if !errors.As(err, &re) || re.Refused || !strings.Contains(re.Msg, "could not be reached") {
			t.Fatalf("Dial: %v; want a RemoteError that may be retried, saying the agent could not be reached", err)
		}
	})
	t.Run("the card's own interface", func(t *testing.T) {
		srv := remoteCard(t, jsonrpc)
		c, err := a2a.Dial(context.Background(), srv.Client(), srv.URL+a2a.CardPath, remoteToken)
		if err != nil || !c.Streaming {
			t.Fatalf("Dial: %v, %+v; want a streaming client of the card's interface", err, c)
		}
	})
}
