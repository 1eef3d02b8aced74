// Package order is the order state machine: orders, their items and
// payments, with conditional transitions whose zero-row outcomes are always
// classified.
package order
