// Package outbox is the transactional outbox: the event_outbox table, the
// helpers that enqueue events inside the caller's transaction, and a relay
// that publishes them after commit, at least once.
package outbox
