package main

import (
	"context"
	"encoding/binary"
	"fmt"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

// record is rank q's record seq of -block bytes: q, seq, then stamped
// bytes (never 0, so a hole shows).
func record(q, seq, size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b[0:], uint32(q))
	binary.LittleEndian.PutUint32(b[4:], uint32(seq))
	for k := 8; k < size; k++ {
		b[k] = stamp(q, seq, int64(k))
	}
	return b
}

// runShared: every rank writes its records at the shared file pointer at
// once; then every rank reads the whole file and checks that the records
// tile it, each once and whole, each rank's in the order it wrote them.
func runShared(ctx context.Context, comm *mpi.Comm, cfg config, hosts []string) (bool, error) {
	r, p := comm.Rank(), comm.Size()
	f, err := mpiio.Open(ctx, comm, cfg.path, mpiio.ModeCreate|mpiio.ModeRdwr, cfg.hints)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := f.SetSize(0); err != nil {
		return false, err
	}
	for seq := 0; seq < cfg.blocks; seq++ {
		if _, err := f.WriteShared(record(r, seq, cfg.block)); err != nil {
			return false, err
		}
	}
	if err := f.Sync(); err != nil {
		return false, err
	}
	total := p * cfg.blocks
	all := make([]byte, total*cfg.block)
	report := ""
	if n, err := f.ReadAt(all, 0); err != nil {
		report = fmt.Sprintf("rank %d on %s: read %d of %d bytes: %v", r, hosts[r], n, len(all), err)
	}
	if size, err := f.Size(); report == "" && (err != nil || size != int64(len(all))) {
		report = fmt.Sprintf("rank %d on %s: file is %d bytes (%v), want %d", r, hosts[r], size, err, len(all))
	}
	next := make([]int, p)
	for i := 0; i < total && report == ""; i++ {
		b := all[i*cfg.block : (i+1)*cfg.block]
		q, seq := int(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
		switch {
		case q >= p || seq >= cfg.blocks || string(b) != string(record(q, seq, cfg.block)):
			report = fmt.Sprintf("record %d (file offset %d) read by rank %d on %s is not a whole record: torn or overlapped", i, i*cfg.block, r, hosts[r])
		case seq != next[q]:
			report = fmt.Sprintf("record %d (file offset %d): rank %d's record %d where its %d was due (lost or doubled), read by rank %d on %s", i, i*cfg.block, q, seq, next[q], r, hosts[r])
		default:
			next[q]++
		}
	}
	if err := f.Close(); err != nil {
		return false, err
	}
	oks, err := verdict(comm, report)
	if err != nil {
		return false, err
	}
	if r == 0 {
		nh := map[string]bool{}
		for _, h := range hosts {
			nh[h] = true
		}
		if oks {
			fmt.Printf("gompi-iocheck: ok: %d ranks on %d hosts wrote %d records of %d bytes to %s (shared); every rank read each exactly once, whole, in its writer's order\n",
				p, len(nh), total, cfg.block, cfg.path)
		}
	}
	return oks, nil
}
