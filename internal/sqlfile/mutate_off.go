//go:build !sqlmutate

package sqlfile

// MutationHook reports whether this binary was built with the sqlmutate
// tag, i.e. whether its statements can be replaced from the environment.
const MutationHook = false

func callerPackage() string { return "" }
