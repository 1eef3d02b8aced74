// Package inbox is the idempotent consumer: the consumer_inbox table and the
// helpers that let a message consumer claim a message inside its own
// transaction, so that a redelivered message is recognised and answered with
// the result of its first processing.
package inbox
