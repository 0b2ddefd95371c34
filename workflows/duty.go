package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// dutyPass runs a duty's one activity (a company-wide pass started by the
// duty's Temporal Schedule) within timeout, trying it at most attempts
// times, and returns the pass's report.
func dutyPass[T any](ctx workflow.Context, activity string, timeout time.Duration, attempts int32) (T, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: timeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: attempts},
	})
	var out T
	err := workflow.ExecuteActivity(ctx, activity).Get(ctx, &out)
	return out, err
}
