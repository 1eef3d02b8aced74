package broker

import "github.com/seckillkit/seckill/outbox"

// Faults are the fault-injection hooks of the example's fault tests (a
// PubAck lost, a consumer killed between COMMIT and ack). Production code
// never sets them: a copy of this package for a real service can delete
// this file, JetStream's faults field and the two calls of its methods.
type Faults struct {
	// DropPubAck, when set, makes the relay's publisher treat the PubAck
	// of a message it returns true for as lost: the message is in the
	// stream, the relay hears nothing.
	DropPubAck func(outbox.Message) bool
	// CrashAfterCommit, when set, makes an order consumer that committed
	// the first delivery of a message it returns true for neither ack nor
	// nak, as a consumer killed between COMMIT and ack.
	CrashAfterCommit func(Message) bool
}

// InjectFaultsForTest makes j inject f's faults from now on; only the
// fault tests call it.
func (j *JetStream) InjectFaultsForTest(f Faults) { j.faults.Store(&f) }

// dropPubAck reports whether the fault tests drop m's PubAck.
func (j *JetStream) dropPubAck(m outbox.Message) bool {
	f := j.faults.Load()
	return f != nil && f.DropPubAck != nil && f.DropPubAck(m)
}

// crashAfterCommit reports whether the fault tests kill the consumer of m
// between its COMMIT and its ack.
func (j *JetStream) crashAfterCommit(m Message) bool {
	f := j.faults.Load()
	return f != nil && f.CrashAfterCommit != nil && f.CrashAfterCommit(m)
}
