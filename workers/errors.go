package workers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/metrics"
)

// publicErrors keeps internal failure text (SQL, Redis, Temporal, a dial
// error) out of what an activity's failure carries into workflow state: a
// seat's last_error, a dead letter's reason, a turn's note, and from there
// API responses and replies. Every activity passes through it, so a new one
// cannot forget.
type publicErrors struct {
	interceptor.WorkerInterceptorBase
	log *slog.Logger
	// metrics counts, per activity, the failures that were fenced and the
	// internal ones; nil counts none.
	metrics *metrics.Metrics
}

func (p *publicErrors) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &publicErrorsActivity{log: p.log, metrics: p.metrics}
	a.Next = next
	return a
}

type publicErrorsActivity struct {
	interceptor.ActivityInboundInterceptorBase
	log     *slog.Logger
	metrics *metrics.Metrics
}

func (a *publicErrorsActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	name := activity.GetInfo(ctx).ActivityType.Name
	err = publicError(err, name, a.log)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case crewlet.ErrorTypeFenced:
			a.metrics.Fenced(name)
		case crewlet.ErrorTypeInternal:
			a.metrics.InternalError(name)
		}
	}
	return res, err
}

// publicError is what an activity's failure may say outside the worker: an
// error the activity made deliberately (a Temporal application error:
// fenced, a provider's refusal, a panic) or a domain error (crewlet.Error:
// its public message) as it is; a cancellation as it is; anything else an
// "internal error" that names the log line holding its text. It stays
// retryable, as it was.
func publicError(err error, activityName string, log *slog.Logger) error {
	var appErr *temporal.ApplicationError
	var domain *crewlet.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &appErr), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &domain):
		return temporal.NewApplicationError(fmt.Sprintf("%s: %s", crewlet.ErrorCode(err), crewlet.ErrorMessage(err)), crewlet.ErrorCode(err))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	log.Error("activity_failed", "activity", activityName, "error_id", id, "error", err)
	return temporal.NewApplicationError(fmt.Sprintf("internal error in %s; the worker log has it as error_id=%s", activityName, id), crewlet.ErrorTypeInternal)
}
