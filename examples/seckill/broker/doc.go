// Package broker carries the order messages from the front door to the
// consumers, and on the real stack the outbox events too. [Broker] is what
// the service needs of it; [JetStream] is the broker of a real deployment
// (NATS JetStream: a bounded work-queue stream for the orders, acked only
// after COMMIT, and a stream that keeps the events, both with a duplicate
// window), [Memory] the in-process stand-in of -stack memory. Delivery is at
// least once: the consumers' inbox makes processing exactly once.
//
// How main uses it: the service publishes one [Message] per reservation the
// front door made ([ErrBusy] when full: backpressure) and runs Consume with
// the order handler, which acknowledges a message only once its transaction
// committed. On the real stack it also gives the outbox relays
// [JetStream.EventPublisher], runs [JetStream.ConsumeEvents] or, for the
// consumers that claim events in batches, [JetStream.ConsumeEventBatches]
// for each of [EventConsumers], reads [JetStream.State] for the reconciliation and
// [JetStream.InboxRetention] for the inbox's minimum retention, and sets
// [JetStream.OnPoison] to record the messages it gives up on. The fault
// tests inject faults through [JetStream.InjectFaultsForTest] (faults.go),
// which production code never calls.
package broker
