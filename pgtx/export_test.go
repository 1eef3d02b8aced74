package pgtx

import "errors"

// Test-only access to unexported parts of the package.

// Backoff is backoff, for the tests of its bounds.
var Backoff = backoff

// NewAttemptsError returns the error of a call that gave up after n
// attempts, the last failing with err.
func NewAttemptsError(n int, err error) error { return &attemptsError{attempts: n, err: err} }

// AttemptsOf returns the number of attempts of a call that gave up
// (matching ErrTooManyAttempts), and whether err is such an error.
func AttemptsOf(err error) (int, bool) {
	var ae *attemptsError
	if !errors.As(err, &ae) {
		return 0, false
	}
	return ae.attempts, true
}
