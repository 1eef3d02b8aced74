// Package guardstore keeps what the sale's HTTP face remembers between
// requests: the webhook signatures already used, the rate windows and the
// idempotency records. [Store] is what the guard needs of it; [Redis] is
// the store of the real stack (every key on its own: fine on Redis Cluster),
// [Memory] the in-process map of -stack memory, with the same semantics.
//
// How main uses it: the HTTP guard picks one store when the service starts,
// names every key with [Key] (client-chosen keys are hashed, never Redis
// keys), counts each click in its rate windows and claims its
// Idempotency-Key in the same round trip ([Store.Hit] with a [Claim]),
// settles the claim with the response ([Store.Settle]), and refuses a
// replayed payment callback signature ([Store.UseOnce]).
//
// # Sent again
//
// go-redis sends a command again when its answer was lost (a read
// timeout, a cut connection: its MaxRetries). The writes of [Redis] are
// safe to send again: each stores a value unique to its call and counts
// finding its own value as its own effect. [Redis.UseOnce] stores a random
// token of the call, so the call sent again is still the signature's first
// use and a second delivery (another call) is the replay; a [Claim] sent
// again finds its own pending (unique: the guard puts a random owner in
// it) and is claimed, not in progress; a [Store.Settle] sent again finds
// its final and answers true. A rate window sent again counts its request
// twice: the limit errs on the strict side.
package guardstore
