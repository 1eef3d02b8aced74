package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// walShare is the WAL that one relation (or, for records that touch no
// relation, one resource manager) took in a window.
type walShare struct {
	name    string
	records int64
	bytes   int64 // the records' total length, full-page images included
	fpi     int64 // of which the full-page images (a record's total less its main data)
}

// walRecord matches the start of a pg_waldump line: the resource manager
// and the record's main and total length; walBlock its first block
// reference's relfilenode.
var (
	walRecord = regexp.MustCompile(`^rmgr: (\S+)\s+len \(rec/tot\):\s+(\d+)/\s*(\d+),`)
	walBlock  = regexp.MustCompile(`blkref #0: rel \d+/\d+/(\d+)`)
)

// walByRelation reads the WAL written between from and to with pg_waldump
// (binDir's) from the throwaway server's pg_wal, and sums each record's
// total length by the relation of its first block reference, named from
// pg_class (a record without one is named by its resource manager, in
// brackets; an index by its table too). Heaviest first.
func walByRelation(ctx context.Context, pool *pgxpool.Pool, binDir, walDir string, from, to uint64) ([]walShare, error) {
	names, err := relationNames(ctx, pool)
	if err != nil {
		return nil, err
	}
	// binDir may hold links to the server's programs only: pg_waldump is
	// beside the program postgres links to.
	if real, err := filepath.EvalSymlinks(filepath.Join(binDir, "postgres")); err == nil {
		binDir = filepath.Dir(real)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_waldump"), "-p", walDir, "-s", lsnText(from), "-e", lsnText(to))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pg_waldump: %w", err)
	}
	shares, n := sumWAL(out, names)
	// pg_waldump ends with an error when the end position is not a record
	// boundary; the records before it are read.
	if werr := cmd.Wait(); werr != nil && n == 0 {
		return nil, fmt.Errorf("pg_waldump: %w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	return shares, nil
}

// sumWAL sums pg_waldump's records read from r by relation (names: by
// relfilenode) and returns the shares, heaviest first, and the number of
// records read.
func sumWAL(r io.Reader, names map[uint32]string) ([]walShare, int) {
	by := map[string]*walShare{}
	n := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := walRecord.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n++
		rec, _ := strconv.ParseInt(m[2], 10, 64)
		tot, _ := strconv.ParseInt(m[3], 10, 64)
		name := "[" + m[1] + "]"
		if b := walBlock.FindStringSubmatch(line); b != nil {
			node, _ := strconv.ParseUint(b[1], 10, 32)
			if name = names[uint32(node)]; name == "" {
				name = "relfilenode " + b[1]
			}
		}
		s := by[name]
		if s == nil {
			s = &walShare{name: name}
			by[name] = s
		}
		s.records++
		s.bytes += tot
		if strings.Contains(line, " FPW") {
			s.fpi += tot - rec
		}
	}
	out := make([]walShare, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].bytes > out[j].bytes || out[i].bytes == out[j].bytes && out[i].name < out[j].name
	})
	return out, n
}

// relationNames maps each relfilenode of the database to the relation's
// name: schema.table, or schema.table/index for an index, or the TOAST
// table's own name.
func relationNames(ctx context.Context, pool *pgxpool.Pool) (map[uint32]string, error) {
	rows, err := pool.Query(ctx, `SELECT pg_relation_filenode(c.oid)::int8,
		       n.nspname || '.' || coalesce(t.relname || '/', '') || c.relname
		  FROM pg_class AS c
		  JOIN pg_namespace AS n ON n.oid = c.relnamespace
		  LEFT JOIN pg_index AS i ON i.indexrelid = c.oid
		  LEFT JOIN pg_class AS t ON t.oid = i.indrelid
		 WHERE pg_relation_filenode(c.oid) IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("relation names: %w", err)
	}
	defer rows.Close()
	names := map[uint32]string{}
	for rows.Next() {
		var node int64
		var name string
		if err := rows.Scan(&node, &name); err != nil {
			return nil, err
		}
		names[uint32(node)] = name
	}
	return names, rows.Err()
}

// lsnText prints a WAL position as pg_lsn does.
func lsnText(p uint64) string { return fmt.Sprintf("%X/%X", p>>32, uint32(p)) }

// reportWAL prints the WAL of each rate's window per order, by relation:
// the heaviest rows, then the rest in one line.
func reportWAL(out io.Writer, rs []rateResult) {
	for _, r := range rs {
		if len(r.wal) == 0 {
			continue
		}
		var all, fpi int64
		for _, s := range r.wal {
			all, fpi = all+s.bytes, fpi+s.fpi
		}
		fmt.Fprintf(out, "\nWAL by relation, %d/s offered (pg_waldump over the window: %.0f B per order, %.0f%% of it full-page images):\n\n", r.offered,
			ratio(float64(all), float64(r.orders)), 100*ratio(float64(fpi), float64(all)))
		fmt.Fprintln(out, "| relation (or [record kind]) | B/order | records/order | full-page images B/order |")
		fmt.Fprintln(out, "|---|---:|---:|---:|")
		var rest walShare
		for i, s := range r.wal {
			if i >= 20 {
				rest.records, rest.bytes, rest.fpi = rest.records+s.records, rest.bytes+s.bytes, rest.fpi+s.fpi
				continue
			}
			fmt.Fprintf(out, "| %s | %.0f | %.2f | %.0f |\n", s.name, ratio(float64(s.bytes), float64(r.orders)),
				ratio(float64(s.records), float64(r.orders)), ratio(float64(s.fpi), float64(r.orders)))
		}
		if rest.records > 0 {
			fmt.Fprintf(out, "| %d others | %.0f | %.2f | %.0f |\n", len(r.wal)-20, ratio(float64(rest.bytes), float64(r.orders)),
				ratio(float64(rest.records), float64(r.orders)), ratio(float64(rest.fpi), float64(r.orders)))
		}
	}
}
