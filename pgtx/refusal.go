package pgtx

// OnRefusal chooses what a helper queued on a batch does when its guard
// refuses: the sale is sold out or not on, the message or the event is a
// duplicate, the buyer already ordered, the state already moved on. Every
// queued helper that can refuse takes one as its last argument; the
// helper's direct form (in a transaction) always returns the refusal.
type OnRefusal uint8

const (
	// Return makes the refusal the statement's result, decoded into the
	// helper's destination (or its typed error), exactly as the direct
	// form reports it. The batch's other statements still run: use it
	// when nothing queued after the helper depends on its success.
	Return OnRefusal = iota
	// Abort makes the statement raise the refusal on the server (a
	// SQLSTATE of class SK, see the packages' documentation): the server
	// skips the rest of the batch and commits nothing, and the error
	// [RunBatch] returns matches the helper's sentinel with errors.Is and
	// names the helper in its [StatementError.Call]. Use it for a batch
	// that must commit whole or not at all, such as an order placed in
	// one round trip.
	Abort
)
