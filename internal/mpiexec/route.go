package mpiexec

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// OutputConfig routes the ranks' output as Hydra's -outfile-pattern,
// -errfile-pattern, -prepend-pattern and -output-from do. The zero value
// sends everything to Config.Stdout and Config.Stderr.
type OutputConfig struct {
	// OutFile and ErrFile name each rank's stdout and stderr file on the
	// launch host; nil keeps the stream on the terminal. A file is opened
	// at the first output for it, created 0600 and not truncated (as
	// Hydra's); ranks whose names agree share it, line by line.
	OutFile, ErrFile *Pattern
	// Prepend prefixes every output line, on the terminal and in files
	// (nil: "[rank] " when Config.PrependRank is set, else nothing).
	Prepend *Pattern
	// From, with FromSet, drops every rank's output but this one's.
	From    int
	FromSet bool
}

func (c OutputConfig) routed() bool {
	return c.OutFile != nil || c.ErrFile != nil || c.FromSet
}

// router sits in front of the terminal's output when output goes to
// files or is filtered; jobs without those options write straight to the
// terminal's output (the measured path stays as it was).
type router struct {
	term  *output
	cfg   OutputConfig
	vars  func(rank int) PatternVars
	newTo func(w *os.File) *output // an output like term's, for a file
	fail  func(err error)

	mu sync.Mutex
	// open are the files by name: Config.files, shared by the attempts
	// of a restarted job so that a relaunch writes on after the first
	// attempt's output instead of over it; own when the router made it.
	open  map[string]*os.File
	own   bool
	files map[string]*fileOut
	dest  map[streamKey]*output // resolved file of a rank's stream; nil after a failed open
	known map[streamKey]bool
}

type fileOut struct {
	f   *os.File
	out *output
}

func (r *router) write(rank int, fd byte, data []byte) {
	if r.cfg.FromSet && rank != r.cfg.From {
		return
	}
	pat := r.cfg.OutFile
	if fd == 2 {
		pat = r.cfg.ErrFile
	}
	if pat == nil {
		r.term.write(rank, fd, data)
		return
	}
	if o := r.destFor(rank, fd, pat); o != nil {
		// A file is one stream: a rank's stdout and stderr sharing it
		// keep each other's lines whole too.
		o.write(rank, 1, data)
	}
}

// destFor opens (or finds) the file rank's stream fd goes to.
func (r *router) destFor(rank int, fd byte, pat *Pattern) *output {
	k := streamKey{rank, fd}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.known[k] {
		return r.dest[k]
	}
	r.known[k] = true
	path := string(pat.Expand(nil, r.vars(rank)))
	fo := r.files[path]
	if fo == nil {
		f := r.open[path]
		if f == nil {
			// No O_TRUNC, as Hydra: a shorter output leaves the old tail.
			var err error
			if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600); err != nil {
				r.fail(fmt.Errorf("cannot open output file for rank %d: %w", rank, err))
				return nil
			}
			r.open[path] = f
		}
		fo = &fileOut{f: f, out: r.newTo(f)}
		fo.out.onErr = func(_ byte, err error) {
			r.fail(fmt.Errorf("cannot write output file %s (%w)", path, err))
		}
		r.files[path] = fo
	}
	r.dest[k] = fo.out
	return fo.out
}

// flush writes what is left of rank's output, wherever it goes.
func (r *router) flush(rank int) {
	r.term.flush(rank)
	r.mu.Lock()
	outs := []*output{r.dest[streamKey{rank, 1}], r.dest[streamKey{rank, 2}]}
	r.mu.Unlock()
	for i, o := range outs {
		if o != nil && (i == 0 || o != outs[0]) {
			o.flush(rank)
		}
	}
}

// flushAll writes everything left (and closes the files it opened for
// itself alone).
func (r *router) flushAll() {
	r.term.flushAll()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, fo := range r.files {
		fo.out.flushAll()
	}
	if r.own {
		closeFiles(r.open, io.Discard)
	}
}

// closeFiles closes a job's output files, naming any that fails (a file
// system that reports errors only at close, as NFS may).
func closeFiles(files map[string]*os.File, errw io.Writer) {
	for path, f := range files {
		if err := f.Close(); err != nil {
			fmt.Fprintf(errw, "gompiexec: cannot write output file %s (%v)\n", path, err)
		}
	}
}

// newRouter returns nil when the job's output needs no routing.
func (j *job) newRouter(start time.Time) *router {
	c := j.cfg.Output
	if !c.routed() {
		return nil
	}
	r := &router{
		term: j.out, cfg: c, vars: j.patternVars(start),
		newTo: func(f *os.File) *output {
			o := newOutput(f, f, j.out.prepend)
			o.prefix = j.out.prefix
			return o
		},
		fail: func(err error) {
			select {
			case j.outErr <- err:
			default:
			}
		},
		open: j.cfg.files, own: j.cfg.files == nil,
		files: map[string]*fileOut{}, dest: map[streamKey]*output{}, known: map[streamKey]bool{},
	}
	if r.own {
		r.open = map[string]*os.File{}
	}
	return r
}

// patternVars gives each rank's %r %g %p %h %t.
func (j *job) patternVars(start time.Time) func(rank int) PatternVars {
	return func(rank int) PatternVars {
		v := PatternVars{Rank: rank, Secs: int64(time.Since(start) / time.Second)}
		if rank >= 0 && rank < len(j.layout.Ranks) {
			h := j.layout.Ranks[rank].Host
			v.Proxy, v.Host = h, j.layout.Hosts[h].Name
		}
		return v
	}
}
