package activities

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/testenv"
)

// The package's own Temporal namespace, registered by the first test that
// dials Temporal: the ticket tests' seat and notes workflow ids are fixed
// (seat/cto, notes/alice), so in the shared "default" namespace two runs on
// one dev stack would close each other's.
var (
	namespaceOnce sync.Once
	namespace     string
	namespaceErr  error
	dropNamespace = func() {}
)

func TestMain(m *testing.M) {
	code := m.Run()
	dropNamespace()
	os.Exit(code)
}

// packageNamespace returns the package's namespace, registering it first.
func packageNamespace(t testing.TB) string {
	t.Helper()
	hostPort := testenv.Stack(t).Temporal
	namespaceOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var drop func()
		if namespace, drop, namespaceErr = testenv.Namespace(ctx, hostPort, "crewlet-activities"); namespaceErr == nil {
			dropNamespace = drop
		}
	})
	if namespaceErr != nil {
		t.Fatalf("temporal namespace: %v", namespaceErr)
	}
	return namespace
}
