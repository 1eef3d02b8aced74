package seckill_test

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/seckillkit/seckill"
)

// A Request is filled once from the queue message; the packages' inputs
// embed it, so the ids are promoted fields of each input.
func ExampleRequest() {
	req := seckill.Request{
		RequestID:     uuid.MustParse("00000000-0000-0000-0000-00000000000a"),
		MessageID:     uuid.MustParse("00000000-0000-0000-0000-00000000000b"),
		ReservationID: uuid.MustParse("00000000-0000-0000-0000-00000000000c"),
		OrderID:       1001,
		ActivityID:    7,
		SKUID:         42,
		UserID:        9001,
		Bucket:        3,
		Quantity:      1,
	}
	fmt.Println(req.ActivityID, req.SKUID, req.UserID, req.Bucket, req.Quantity)
	// Output: 7 42 9001 3 1
}
