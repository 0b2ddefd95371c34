// Package fanout owns the one bounded fan-out of the calls crewlet makes per
// seat (Temporal starts and signals, Postgres and Redis preparation), so a
// company of 10,000 seats is neither walked one at a time nor flooded at once.
package fanout

import (
	"errors"
	"sync"
)

// Each runs fn for 0..n-1, at most atOnce at a time, and joins what failed.
func Each(n, atOnce int, fn func(i int) error) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, atOnce)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
