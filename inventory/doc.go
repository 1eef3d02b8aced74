// Package inventory keeps bucketed stock in PostgreSQL: per-bucket counters,
// reservations and an append-only ledger, with conditional updates that never
// oversell.
package inventory
