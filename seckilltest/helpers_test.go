package seckilltest_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/fstest"
)

var badFS = fstest.MapFS{"001_broken.up.sql": {Data: []byte("-- +goose Up\nCREATE TABLEX nope (id int);\n")}}

var errFatal = errors.New("fatal")

// fatalTB records a Fatal and stops New by panicking with errFatal; every
// other call goes to the real test (cleanups included).
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); panic(errFatal) }
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(errFatal)
}
