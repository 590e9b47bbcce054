package mpiio

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Hints are MPI_Info key/value pairs for Open, by ROMIO's names where they
// mean the same. Unknown keys are ignored, as MPI says; a known key with a
// wrong value is a *HintError naming it.
//
//	cb_nodes            aggregators for collective I/O (default: one per host)
//	cb_buffer_size      bytes an aggregator handles per round (default 16 MiB;
//	                    it holds two such buffers, to overlap exchange and I/O)
//	romio_cb_write      enable | disable | automatic (default automatic:
//	romio_cb_read       collective buffering unless every rank's range is
//	                    disjoint from the others' and block-aligned)
//	striping_unit       file-domain alignment in bytes (default: the file
//	                    system's block size, at least a page)
//	romio_ds_read       data sieving for independent strided access:
//	romio_ds_write      enable | disable | automatic (default automatic)
//	ind_rd_buffer_size  sieving buffer for reads (default 4 MiB)
//	ind_wr_buffer_size  sieving buffer for writes (default 512 KiB)
//	gompi_sync_write    enable | disable: collective writes fsync before
//	                    returning (default enable; see docs/io.md)
//	gompi_cache_dir     node-local cache directory; turns the write-back
//	                    cache on (see docs/io.md)
//	gompi_cache_flush   bytes of cached extents the flusher writes per
//	                    pwrite (default 4 MiB)
//	gompi_cache_flush_delay  a pause before each flush (a Go duration;
//	                    for tests of crash recovery; a Sync or Close
//	                    cuts it short; default 0)
//	gompi_cache_snapshot  enable | disable (default disable; automatic is
//	                    disable): a cached write of at least
//	                    gompi_cache_snapshot_min bytes from private memory
//	                    returns after a fork; a copy-on-write snapshot
//	                    process writes it into the cache (docs/io.md); the
//	                    environment's GOMPI_COW=off turns it off
//	gompi_cache_snapshot_min  bytes (default 1 MiB)
type Hints map[string]string

// HintError is a known hint with a value it cannot take.
type HintError struct {
	Key, Value string
	Err        error
}

func (e *HintError) Error() string {
	return fmt.Sprintf("mpiio: hint %s=%q: %v", e.Key, e.Value, e.Err)
}

func (e *HintError) Unwrap() error { return e.Err }

// Tri-state hint values.
type tri int

const (
	auto tri = iota
	enable
	disable
)

func (t tri) String() string { return [...]string{"automatic", "enable", "disable"}[t] }

type config struct {
	cbNodes     int // 0: one per host
	cbBuffer    int64
	cbWrite     tri
	cbRead      tri
	stripe      int64 // 0: from the file system
	dsRead      tri
	dsWrite     tri
	indRdBuffer int64
	indWrBuffer int64
	syncWrite   bool
	cacheDir    string
	cacheFlush  int64
	flushDelay  time.Duration // gompi_cache_flush_delay: tests' slow flusher
	snapshot    bool          // gompi_cache_snapshot
	snapMin     int64         // gompi_cache_snapshot_min
}

// maxBuffer bounds the buffer-size hints.
const maxBuffer = 1 << 30

func parseHints(h Hints) (config, error) {
	c := config{cbBuffer: 16 << 20, indRdBuffer: 4 << 20, indWrBuffer: 512 << 10, syncWrite: true, cacheFlush: 4 << 20, snapMin: 1 << 20}
	size := func(k, v string, min int64) (int64, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < min {
			return 0, &HintError{k, v, fmt.Errorf("want an integer >= %d", min)}
		}
		return n, nil
	}
	// Buffers are allocated at their hinted size: past maxBuffer a typo
	// would end the process (Go's out-of-memory is fatal), not the call.
	buffer := func(k, v string, min int64) (int64, error) {
		n, err := size(k, v, min)
		if err == nil && n > maxBuffer {
			err = &HintError{k, v, fmt.Errorf("want at most %d (1 GiB)", int64(maxBuffer))}
		}
		return n, err
	}
	triv := func(k, v string) (tri, error) {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "automatic", "auto":
			return auto, nil
		case "enable", "true":
			return enable, nil
		case "disable", "false":
			return disable, nil
		}
		return 0, &HintError{k, v, fmt.Errorf("want enable, disable or automatic")}
	}
	var err error
	for k, v := range h {
		if v == "" && k == "cb_nodes" {
			continue
		}
		var n int64
		switch k {
		case "cb_nodes":
			n, err = size(k, v, 1)
			c.cbNodes = int(n)
		case "cb_buffer_size":
			// Any positive size, as ROMIO: small ones mean many rounds.
			c.cbBuffer, err = buffer(k, v, 1)
		case "romio_cb_write":
			c.cbWrite, err = triv(k, v)
		case "romio_cb_read":
			c.cbRead, err = triv(k, v)
		case "striping_unit":
			c.stripe, err = size(k, v, 1)
		case "romio_ds_read":
			c.dsRead, err = triv(k, v)
		case "romio_ds_write":
			c.dsWrite, err = triv(k, v)
		case "ind_rd_buffer_size":
			c.indRdBuffer, err = buffer(k, v, 1)
		case "ind_wr_buffer_size":
			c.indWrBuffer, err = buffer(k, v, 1)
		case "gompi_sync_write":
			var t tri
			t, err = triv(k, v)
			c.syncWrite = t != disable
		case "gompi_cache_dir":
			if strings.TrimSpace(v) == "" {
				err = &HintError{k, v, fmt.Errorf("want a directory")}
			}
			c.cacheDir = v
		case "gompi_cache_flush":
			c.cacheFlush, err = buffer(k, v, 4096)
		case "gompi_cache_flush_delay":
			if c.flushDelay, err = time.ParseDuration(v); err != nil || c.flushDelay < 0 {
				err = &HintError{k, v, fmt.Errorf("want a non-negative Go duration")}
			}
		case "gompi_cache_snapshot":
			var t tri
			t, err = triv(k, v)
			c.snapshot = t == enable
		case "gompi_cache_snapshot_min":
			c.snapMin, err = size(k, v, 1)
		}
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// planKeys are the hints every rank computes collective calls' plans
// from: they must be the same on every rank (checked at Open, as ROMIO
// checks them: MPI_ERR_NOT_SAME), else ranks plan different exchanges.
var planKeys = []string{"cb_nodes", "cb_buffer_size", "romio_cb_write", "romio_cb_read", "striping_unit"}

// planValues are c's values of planKeys (defaults included, so a default
// and its value given explicitly agree).
func (c config) planValues() []int64 {
	return []int64{int64(c.cbNodes), c.cbBuffer, int64(c.cbWrite), int64(c.cbRead), c.stripe}
}

// planValue formats value v of planKeys[i] for a message.
func planValue(i int, v int64) string {
	switch {
	case planKeys[i] == "romio_cb_write" || planKeys[i] == "romio_cb_read":
		return tri(v).String()
	case v == 0:
		return "default"
	}
	return strconv.FormatInt(v, 10)
}

// effective lists the hints in force (MPI_File_get_info).
func (c config) effective(naggs int) Hints {
	h := Hints{
		"cb_nodes":           strconv.Itoa(naggs),
		"cb_buffer_size":     strconv.FormatInt(c.cbBuffer, 10),
		"romio_cb_write":     c.cbWrite.String(),
		"romio_cb_read":      c.cbRead.String(),
		"striping_unit":      strconv.FormatInt(c.stripe, 10),
		"romio_ds_read":      c.dsRead.String(),
		"romio_ds_write":     c.dsWrite.String(),
		"ind_rd_buffer_size": strconv.FormatInt(c.indRdBuffer, 10),
		"ind_wr_buffer_size": strconv.FormatInt(c.indWrBuffer, 10),
		"gompi_sync_write":   map[bool]string{true: "enable", false: "disable"}[c.syncWrite],
	}
	if c.cacheDir != "" {
		h["gompi_cache_dir"] = c.cacheDir
		h["gompi_cache_flush"] = strconv.FormatInt(c.cacheFlush, 10)
		h["gompi_cache_snapshot"] = map[bool]string{true: "enable", false: "disable"}[c.snapshot]
		h["gompi_cache_snapshot_min"] = strconv.FormatInt(c.snapMin, 10)
	}
	return h
}
