// Package web is the HTTP face of the example service: the buyers' routes
// (POST /orders, GET /orders/{request_id}, POST /payments/callback, each
// authenticated: signed bearer tokens, signed callbacks, idempotency keys,
// rate limits) and the operators' (the live operator page, the audit, the
// reconciliation, the figures, GET /metrics), over any [Service].
//
// It holds no state of the sale: the front door, the broker and the
// database are the service's. What the face remembers between requests
// (signatures seen, rate windows, idempotency records) is a
// guardstore.Store.
//
// # Reading order
//
// api.go has the routes and their answers; security.go says what is
// trusted and why, with auth.go (buyer tokens), callback.go (signed
// payment callbacks), idempotency.go (Idempotency-Key) and ratelimit.go;
// page.go and page.html are the live operator page. service.go is the
// [Service] a deployment implements: the example's main package does it
// over the kit's flow, a Redis front door and NATS JetStream.
package web
