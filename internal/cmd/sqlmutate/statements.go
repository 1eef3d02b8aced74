package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/seckillkit/seckill/internal/sqlfile"
)

// statusEnums are the status enumerations of each package, as their
// CHECK constraints list them (by column; "status" is the package's main
// one).
var statusEnums = map[string]enums{
	"inbox":     {"status": {10, 20}},
	"outbox":    {"status": {0, 10, 20, 30, 40}},
	"order":     {"status": {10, 20, 30, 40, 50, 60}},
	"inventory": {"status": {0, 10, 20, 30, 40, 50, 60}, "sale_status": {10, 20, 30}},
	"pgtx":      {},
	"migrate":   {},
}

// packageMutants returns the mutants of every statement of pkg whose
// qualified name matches only, each with its line in its .sql file.
func packageMutants(pkg string, only *regexp.Regexp) ([]mutant, error) {
	return packageMutantsIn(".", pkg, only)
}

// packageMutantsIn is packageMutants for the module whose root is root.
func packageMutantsIn(root, pkg string, only *regexp.Regexp) ([]mutant, error) {
	enumOf, ok := statusEnums[pkg]
	if !ok {
		return nil, fmt.Errorf("unknown package %q (want inbox, outbox, order, inventory, pgtx or migrate)", pkg)
	}
	set, err := sqlfile.Parse(os.DirFS(filepath.Join(root, pkg)), "sql")
	if err != nil {
		return nil, err
	}
	var out []mutant
	for _, st := range set.Statements() {
		q := sqlfile.Qualified(pkg, st.Name)
		if !only.MatchString(q) {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, pkg, st.File))
		if err != nil {
			return nil, err
		}
		first := strings.Count(string(src[:strings.Index(string(src), st.Text)]), "\n") + 1
		for _, m := range generate(st.Text, enumOf) {
			m.Statement, m.File, m.Line = q, filepath.Join(pkg, st.File), first+m.Line
			out = append(out, m)
		}
	}
	return out, nil
}
