package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// countTemporalCalls is a benchmark hook (testhook.Hooks.TemporalCalls):
// with path naming a file, every call this process makes to Temporal is
// counted and the running total written to that file every second
// ("calls N"), so a benchmark can tell what idle seats cost in calls.
func countTemporalCalls(path string) (grpc.DialOption, bool) {
	if path == "" {
		return nil, false
	}
	var calls atomic.Int64
	go func() {
		for range time.Tick(time.Second) {
			_ = os.WriteFile(path, []byte(fmt.Sprintf("calls %d\n", calls.Load())), 0o644)
		}
	}()
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		calls.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}), true
}
