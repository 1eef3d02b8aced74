package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/internal/orderid"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
)

// The limits the kit is measured against: statements sent alone, so that
// PostgreSQL commits them implicitly in the same round trip (no BEGIN, no
// COMMIT message): the hot bucket's row lock is held only while the server
// executes the statement and flushes its commit.
//
// limit-min is the minimal order, the bucket decrement and the order row
// (the hot row's physical limit); limit-full writes every row the kit's
// fresh path writes — the inbox row with its result, the reservation
// (straight to ORDERED), the order and its item, the bucket decrement, the
// ledger row and the outbox event — in one statement (the limit for the
// kit's own work). Neither checks anything a statement cannot check by
// itself (a duplicate message fails on a unique index), so they are
// audited like raw.
const limitMinSQL = `WITH a AS (
  UPDATE {s}.sku_inventory
  SET available_stock = available_stock - 1, allocated_stock = allocated_stock + 1,
      version = version + 1, updated_at = statement_timestamp()
  WHERE activity_id = $6::int8 AND sku_id = $7::int8 AND bucket_no = $9::int2 AND available_stock >= 1
  RETURNING 1)
INSERT INTO {s}.orders (order_id, order_no, request_id, reservation_id, source_message_id,
    activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at)
SELECT $1::int8, $2::text, $3::uuid, $4::uuid, $5::uuid, $6::int8, $7::int8, $8::int8, $9::int2, 1, $10::int8, $10::int8, $11::text, 10, $12::timestamptz
FROM a
RETURNING order_id`

const limitFullSQL = `WITH a AS (
  UPDATE {s}.sku_inventory
  SET available_stock = available_stock - 1, allocated_stock = allocated_stock + 1,
      version = version + 1, updated_at = statement_timestamp()
  WHERE activity_id = $6::int8 AND sku_id = $7::int8 AND bucket_no = $9::int2 AND available_stock >= 1
  RETURNING available_stock + 1 AS ba, available_stock AS aa, allocated_stock - 1 AS bl, allocated_stock AS al),
i AS (
  INSERT INTO {s}.consumer_inbox (consumer_group, message_id, topic, tag, message_key, ref,
      payload_hash, status, result_code, result_payload)
  SELECT $13::text, $5::uuid, $14::text, $15::text, $4::uuid::text, $4::uuid::text, $16::bytea, 20, 'ORDER_CREATED', $17::jsonb FROM a),
r AS (
  INSERT INTO {s}.inventory_reservation (reservation_id, request_id, first_message_id, activity_id,
      sku_id, user_id, inventory_bucket, quantity, status, redis_reserved_at, expires_at, order_id, ordered_at)
  SELECT $4::uuid, $3::uuid, $5::uuid, $6::int8, $7::int8, $8::int8, $9::int2, 1, 10, $18::timestamptz, $19::timestamptz,
      $1::int8, statement_timestamp() FROM a),
it AS (
  INSERT INTO {s}.order_items (order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
  SELECT $1::int8, 1, $6::int8, $7::int8, $20::text, 1, $10::int8, $10::int8 FROM a),
l AS (
  INSERT INTO {s}.inventory_ledger (idempotency_key, reservation_id, order_id, source_message_id,
      activity_id, sku_id, user_id, inventory_bucket, ledger_type, available_delta, allocated_delta,
      before_available, after_available, before_allocated, after_allocated, reason)
  SELECT 'ALLOCATE:' || $4::uuid::text, $4::uuid, $1::int8, $5::uuid, $6::int8, $7::int8, $8::int8, $9::int2, 10, -1, 1,
      a.ba, a.aa, a.bl, a.al, 'ORDER_CREATED' FROM a),
ob AS (
  INSERT INTO {s}.event_outbox (event_id, dedup_key, aggregate_type, aggregate_id, topic, tag,
      message_key, schema_version, payload, status)
  SELECT $21::uuid, 'ORDER_CREATED:' || $1::int8::text, 'ORDER', $1::int8::text, 'ORDER_EVENT', 'ORDER_CREATED',
      $1::int8::text, 1, $22::jsonb, 0 FROM a)
INSERT INTO {s}.orders (order_id, order_no, request_id, reservation_id, source_message_id,
    activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at)
SELECT $1::int8, $2::text, $3::uuid, $4::uuid, $5::uuid, $6::int8, $7::int8, $8::int8, $9::int2, 1, $10::int8, $10::int8, $11::text, 10, $12::timestamptz
FROM a
RETURNING order_id`

// placeLimitMin sends limitMinSQL alone: one round trip, implicit commit.
func placeLimitMin(ctx context.Context, svc *flow.Service, o orderMsg) error {
	m := o.m
	var id int64
	if err := svc.Pool.QueryRow(ctx, sqlFor(svc.Schema, limitMinSQL), m.OrderID, orderid.FormatNo(m.OrderID), m.RequestID,
		m.ReservationID, o.id, m.ActivityID, m.SKUID, m.UserID, m.Bucket, m.UnitPrice, m.Currency, m.OrderExpireAt).Scan(&id); err != nil {
		return fmt.Errorf("limit-min: %w", err)
	}
	return nil
}

// placeLimitFull sends limitFullSQL alone: one round trip, implicit
// commit. Like the kit it decodes the message and encodes the inbox
// result and the event's payload.
func placeLimitFull(ctx context.Context, svc *flow.Service, o orderMsg) error {
	var m flow.OrderMessage
	if err := json.Unmarshal(o.raw, &m); err != nil {
		return err
	}
	result, _ := json.Marshal(flow.Outcome{Code: flow.CodeOrderCreated, OrderID: m.OrderID})
	payload, _ := json.Marshal(map[string]any{"order_id": m.OrderID, "reservation_id": m.ReservationID, "user_id": m.UserID,
		"activity_id": m.ActivityID, "sku_id": m.SKUID, "amount": m.UnitPrice, "currency": m.Currency})
	var id int64
	if err := svc.Pool.QueryRow(ctx, sqlFor(svc.Schema, limitFullSQL), m.OrderID, orderid.FormatNo(m.OrderID), m.RequestID,
		m.ReservationID, o.id, m.ActivityID, m.SKUID, m.UserID, m.Bucket, m.UnitPrice, m.Currency, m.OrderExpireAt,
		flow.ConsumerGroup, flow.OrderTopic, flow.OrderTag, inbox.HashPayload(o.raw), result,
		m.ReservedAt, m.ReservationTo, m.SKUTitle, uuid.Must(uuid.NewV7()), payload).Scan(&id); err != nil {
		return fmt.Errorf("limit-full: %w", err)
	}
	return nil
}
