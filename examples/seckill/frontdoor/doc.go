// Package frontdoor is the sale's front door: it filters the crowd before
// anything reaches the broker, with per-bucket counters, a one-per-user set
// and a state per reservation. [Redis] is the front door of a real
// deployment (Lua scripts, every key of a sale in one Redis Cluster slot);
// [Memory] is the in-process stand-in of -stack memory. Both implement
// [Door].
//
// PostgreSQL remains the source of truth, so nothing a front door gets
// wrong can oversell: Redis is filled from PostgreSQL at warm-up and, after
// it lost its data, rebuilt from it ([LoadImage], [Redis.Rebuild]), never
// the other way round.
//
// How main uses it: the service builds one Door (NewRedis or NewMemory)
// and calls Reserve on every click it lets through; the reservation it gets
// is what it queues for the broker. The front-door release consumer calls
// Release when PostgreSQL released a reservation; the audit and the
// reconciliation read State; when Reserve answers [ErrDown] on Redis, the
// service rebuilds the keys from [LoadImage].
package frontdoor
