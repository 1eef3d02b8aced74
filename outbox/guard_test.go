package outbox_test

import (
	"testing"
	"time"

	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// The retention statements remove exactly the SENT events sent strictly
// before the horizon: an event sent at the horizon itself stays.
func TestRetentionHorizon(t *testing.T) {
	t.Parallel()
	for name, remove := range map[string]func(b *bundle, db pgtx.Querier, before time.Time) (int64, error){
		"PurgeSent": func(b *bundle, db pgtx.Querier, before time.Time) (int64, error) {
			return b.store.PurgeSent(b.ctx, db, before, 10)
		},
		"ArchiveSent": func(b *bundle, db pgtx.Querier, before time.Time) (int64, error) {
			return b.store.ArchiveSent(b.ctx, db, before, 10)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{})
			res := b.enqueue(t, event(1), event(2))
			b.sendAll(t)
			horizon := time.Now().Add(-10 * 24 * time.Hour).Truncate(time.Millisecond)
			old, atHorizon := res[0].EventID, res[1].EventID
			for id, at := range map[any]time.Time{old: horizon.Add(-time.Hour), atHorizon: horizon} {
				b.exec(t, `UPDATE `+b.table()+` SET created_at = $2, available_at = $2, sent_at = $2 WHERE event_id = $1`, id, at)
			}
			if n, err := remove(b, b.pool, horizon); err != nil || n != 1 {
				t.Fatalf("%s(horizon) = %d, %v; want 1 (the event sent an hour before it)", name, n, err)
			}
			if b.count(t, `event_id = $1`, atHorizon) != 1 {
				t.Errorf("%s removed the event sent at the horizon itself", name)
			}
		})
	}
}
