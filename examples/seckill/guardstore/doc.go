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
package guardstore
