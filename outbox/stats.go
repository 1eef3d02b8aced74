package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// Stats is a snapshot of the outbox: the counts and the age an operator
// watches.
type Stats struct {
	// Pending, Sending, Retry and Dead are exact counts.
	Pending, Sending, Retry, Dead int64
	// Sent is exact while the table is small (at most
	// 1024 pages) and otherwise an estimate from the
	// planner's statistics (see [Store.Stats]); SentEstimated says which.
	Sent          int64
	SentEstimated bool // true when Sent is the planner's estimate, false when it is exact
	// OldestWaiting is the age of the oldest PENDING or RETRY event (0 when
	// there is none): how far publishing lags behind.
	OldestWaiting time.Duration
}

// statsExactSentPages is the table size, in pages (8 kB each by default),
// up to which [Store.Stats] counts SENT events exactly.
const statsExactSentPages = 1024

// Stats reports the events per status and the age of the oldest waiting
// event with one read-only statement whose cost does not follow the SENT
// history. PENDING, SENDING, RETRY and DEAD are counted exactly, each
// through a partial index that holds only that status (so the cost follows
// the events in flight and dead, which an outbox that publishes keeps
// few). SENT is counted exactly while the table has at most
// 1024 pages; beyond that it is estimated, as the planner
// does, from pg_class.reltuples (kept by autovacuum and ANALYZE) scaled to
// the table's current size, minus the exact counts, and SentEstimated is
// set. A table never analysed estimates 0 SENT events.
func (s *Store) Stats(ctx context.Context, db pgtx.Querier) (_ Stats, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return Stats{}, nilHandle("db")
	}
	var (
		st           Stats
		ageUS        int64
		sentExact    *int64
		reltuples    float64
		relpages, np int64
	)
	table := pgx.Identifier{s.schema, "event_outbox"}.Sanitize()
	if err := db.QueryRow(ctx, s.statsSQL, table, statsExactSentPages).Scan(&st.Pending, &st.Sending, &st.Retry, &st.Dead,
		&ageUS, &sentExact, &reltuples, &relpages, &np); err != nil {
		return Stats{}, fmt.Errorf("outbox: stats: %w", err)
	}
	st.OldestWaiting = time.Duration(ageUS) * time.Microsecond
	if sentExact != nil {
		st.Sent = *sentExact
		return st, nil
	}
	st.SentEstimated = true
	if reltuples > 0 && relpages > 0 {
		total := int64(reltuples * float64(np) / float64(relpages))
		st.Sent = max(0, total-st.Pending-st.Sending-st.Retry-st.Dead)
	}
	return st, nil
}

// Backlog is [Store.Stats] without SENT (Sent is 0, SentEstimated
// false): the events waiting (PENDING, SENDING, RETRY) and DEAD, and the
// age of the oldest waiting one. It reads only the partial indexes that
// hold those statuses, so its cost follows the backlog and never the
// table's size, however many SENT events the table keeps: for what is
// polled often (a dashboard's figures, a readiness or drain check),
// where Stats's exact SENT count would read up to 1024 pages each time.
func (s *Store) Backlog(ctx context.Context, db pgtx.Querier) (_ Stats, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return Stats{}, nilHandle("db")
	}
	var st Stats
	var ageUS int64
	if err := db.QueryRow(ctx, s.backlogSQL).Scan(&st.Pending, &st.Sending, &st.Retry, &st.Dead, &ageUS); err != nil {
		return Stats{}, fmt.Errorf("outbox: backlog: %w", err)
	}
	st.OldestWaiting = time.Duration(ageUS) * time.Microsecond
	return st, nil
}
