// Package reconcile is the three-way reconciliation of the sale: it compares
// the front door (Redis) against PostgreSQL's buckets against the ledger,
// the orders by status against the ledger by type, and the events by status
// against the stream and the consumers' inbox rows. It changes nothing:
// every difference gets a name and a class, explained (a known, bounded
// state: in flight, deliberate drift, recorded poison) or not. An
// unexplained difference fails the run.
//
// How main uses it: the service hands [Run] its stores as [Sources] (the
// flow's PostgreSQL service, the broker, the front door, and what it knows
// of the work in flight); the run prints the [Result] at the end
// ([Result.Print]) and fails unless [Result.Passed]; the operator API
// serves it at GET /reconcile. During the sale the operator page runs
// [RunWindow] instead, over the recent windows and the stores' counters,
// at a cost that does not grow with the sale, and shows its verdict.
package reconcile
