//go:build sqlmutate

package sqlfile

import (
	"os"
	"runtime"
	"strings"
)

// MutationHook reports whether this binary was built with the sqlmutate
// tag, i.e. whether its statements can be replaced from the environment.
const MutationHook = true

func init() {
	textHook = func(pkg string, st *Statement) string { return mutatedText(pkg, st, os.Getenv) }
}

// callerPackage is the last element of the package path of MustParse's
// caller: "inbox" for github.com/seckillkit/seckill/inbox.
func callerPackage() string {
	pc, _, _, ok := runtime.Caller(2)
	if !ok {
		return ""
	}
	fn := runtime.FuncForPC(pc).Name() // github.com/…/inbox.init
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		fn = fn[i+1:]
	}
	pkg, _, _ := strings.Cut(fn, ".")
	return pkg
}
