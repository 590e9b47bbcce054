package mpiio

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	mpi "github.com/gompi/gompi/runtime"
)

// piece is a contiguous run: len bytes at file offset off, at buf in the
// caller's buffer.
type piece struct{ off, buf, len int64 }

func collect(v *view, pos, n, lo, hi int64, into []piece) []piece {
	v.pieces(pos, n, lo, hi, func(off, buf, l int64) bool {
		into = append(into, piece{off, buf, l})
		return true
	})
	return into
}

// ReadAt reads len(buf) bytes of the caller's view starting at etype
// offset off (independent). Fewer bytes at the end of the file give the
// count read and an *Error wrapping io.EOF at the offset where data ended.
func (f *File) ReadAt(buf []byte, off int64) (int, error) {
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	f.mu.RLock()
	v, atomic := f.view, f.atomic
	f.mu.RUnlock()
	return f.readAt(v, atomic, buf, off)
}

// WriteAt writes buf to the caller's view starting at etype offset off
// (independent).
func (f *File) WriteAt(buf []byte, off int64) (int, error) {
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	f.mu.RLock()
	v, atomic := f.view, f.atomic
	f.mu.RUnlock()
	return f.writeAt(v, atomic, false, buf, off)
}

// IreadAt starts ReadAt; the request's Status.Bytes (and Count) is the
// bytes read. buf must not be touched until the request completes.
func (f *File) IreadAt(buf []byte, off int64) *mpi.Request {
	if err := f.check("read", false); err != nil {
		return failed(err)
	}
	f.mu.RLock()
	v, atomic := f.view, f.atomic
	f.mu.RUnlock()
	// Held from the call: a Close after it waits for the request.
	release, err := f.using("read")
	if err != nil {
		return failed(err)
	}
	return mpi.Go(func() (mpi.Status, error) {
		defer release()
		n, err := f.readUsing(v, atomic, buf, off)
		return mpi.Status{Source: f.rank, Count: n, Bytes: n}, err
	})
}

// IwriteAt starts WriteAt; buf must not change until the request
// completes.
func (f *File) IwriteAt(buf []byte, off int64) *mpi.Request {
	if err := f.check("write", true); err != nil {
		return failed(err)
	}
	f.mu.RLock()
	v, atomic := f.view, f.atomic
	f.mu.RUnlock()
	release, err := f.using("write")
	if err != nil {
		return failed(err)
	}
	return mpi.Go(func() (mpi.Status, error) {
		defer release()
		n, err := f.writeUsing(v, atomic, false, buf, off)
		return mpi.Status{Source: f.rank, Count: n, Bytes: n}, err
	})
}

func failed(err error) *mpi.Request {
	r, done := mpi.StartRequest()
	done(mpi.Status{}, err)
	return r
}

func (f *File) checkOff(op string, off int64, v *view, n int) error {
	if v.size == 0 && n > 0 {
		return f.err(op, off, fmt.Errorf("%w: %d bytes to a view whose filetype holds no data", ErrView, n))
	}
	if off < 0 {
		return f.err(op, off, fmt.Errorf("%w: negative offset %d", mpi.ErrArg, off))
	}
	if int64(n)%v.etype != 0 {
		// MPI accesses whole etypes; a part of one would split a value.
		return f.err(op, off, fmt.Errorf("%w: %d bytes is not a whole number of %d-byte etypes", mpi.ErrArg, n, v.etype))
	}
	if off > maxOff/v.etype || !v.fits(off*v.etype, int64(n)) {
		return f.err(op, off, fmt.Errorf("%w: offset %d overflows", mpi.ErrArg, off))
	}
	return nil
}

// fits reports whether the file offsets of stream bytes [pos, pos+n) fit
// in an int64 (else they would wrap, to a small offset possibly).
func (v *view) fits(pos, n int64) bool {
	if n <= 0 {
		return true
	}
	if pos > maxOff-n {
		return false
	}
	last := pos + n - 1
	if v.contiguous() {
		return last <= maxOff-v.disp
	}
	// Tile t's data ends by disp + t*extent + lb + extent.
	room := maxOff - v.disp - max(v.lb, 0) - v.extent
	return room >= 0 && last/v.size <= room/v.extent
}

// sieve reports whether pieces are small and many enough to move through
// one buffer (ROMIO's data sieving) under mode t.
func sieve(t tri, ps []piece) bool {
	if len(ps) < 2 || t == disable {
		return false
	}
	if t == enable {
		return true
	}
	var sum int64
	for _, p := range ps {
		sum += p.len
	}
	span := ps[len(ps)-1].off + ps[len(ps)-1].len - ps[0].off
	// Worth it when the pieces are small and fill a good part of the span.
	return sum/int64(len(ps)) < 8<<10 && sum*4 >= span
}

func (f *File) readAt(v *view, atomic bool, buf []byte, off int64) (int, error) {
	release, err := f.using("read")
	if err != nil {
		return 0, err
	}
	defer release()
	return f.readUsing(v, atomic, buf, off)
}

// readUsing is readAt for a caller that holds f.using.
func (f *File) readUsing(v *view, atomic bool, buf []byte, off int64) (int, error) {
	if err := f.checkOff("read", off, v, len(buf)); err != nil {
		return 0, err
	}
	pos := off * v.etype
	ps := collect(v, pos, int64(len(buf)), 0, maxOff, nil)
	if len(ps) == 0 {
		return 0, nil
	}
	if atomic {
		lo, hi := ps[0].off, ps[len(ps)-1].off+ps[len(ps)-1].len
		unlock, err := lockRange(f.fd, unix.F_RDLCK, lo, hi)
		if err != nil {
			return 0, f.err("read", lo, err)
		}
		defer unlock()
	}
	if f.cache != nil {
		if err := f.cache.drain(); err != nil {
			return 0, f.err("read", ps[0].off, err)
		}
	}
	n := int64(0)
	if sieve(f.hints.dsRead, ps) {
		win := make([]byte, min(f.hints.indRdBuffer, ps[len(ps)-1].off+ps[len(ps)-1].len-ps[0].off))
		for i := 0; i < len(ps); {
			lo := ps[i].off
			hi := lo + int64(len(win))
			j := i
			for j < len(ps) && ps[j].off+ps[j].len <= hi {
				j++
			}
			if j == i { // a piece larger than the window: read it directly
				got, err := preadFull(f.fd, buf[ps[i].buf:ps[i].buf+ps[i].len], ps[i].off)
				n += int64(got)
				if err != nil {
					return int(n), f.err("read", ps[i].off+int64(got), err)
				}
				i++
				continue
			}
			end := ps[j-1].off + ps[j-1].len
			got, err := preadFull(f.fd, win[:end-lo], lo)
			for k := i; k < j; k++ {
				p := ps[k]
				if p.off+p.len > lo+int64(got) {
					c := max(0, lo+int64(got)-p.off)
					copy(buf[p.buf:p.buf+c], win[p.off-lo:])
					return int(n + c), f.err("read", p.off+c, err)
				}
				copy(buf[p.buf:p.buf+p.len], win[p.off-lo:])
				n += p.len
			}
			i = j
		}
		return int(n), nil
	}
	for _, p := range ps {
		got, err := preadFull(f.fd, buf[p.buf:p.buf+p.len], p.off)
		n += int64(got)
		if err != nil {
			return int(n), f.err("read", p.off+int64(got), err)
		}
	}
	return int(n), nil
}

// hold: a collective write's (independentAll): a snapshot writer starts
// when the call returns.
func (f *File) writeAt(v *view, atomic, hold bool, buf []byte, off int64) (int, error) {
	release, err := f.using("write")
	if err != nil {
		return 0, err
	}
	defer release()
	return f.writeUsing(v, atomic, hold, buf, off)
}

// writeUsing is writeAt for a caller that holds f.using.
func (f *File) writeUsing(v *view, atomic, hold bool, buf []byte, off int64) (int, error) {
	if err := f.checkOff("write", off, v, len(buf)); err != nil {
		return 0, err
	}
	pos := off * v.etype
	ps := collect(v, pos, int64(len(buf)), 0, maxOff, nil)
	if len(ps) == 0 {
		return 0, nil
	}
	locked := false
	if atomic {
		lo, hi := ps[0].off, ps[len(ps)-1].off+ps[len(ps)-1].len
		unlock, err := lockRange(f.fd, unix.F_WRLCK, lo, hi)
		if err != nil {
			return 0, f.err("write", lo, err)
		}
		defer unlock()
		locked = true
	}
	if f.cache != nil && atomic {
		// Atomic mode writes through: a cached extent would reach the
		// file when its rank's flusher gets to it, after (and over)
		// another rank's later overlapping write, and unseen by other
		// ranks' reads. This rank's own earlier extents go first.
		if err := f.cache.drain(); err != nil {
			return 0, f.err("write", ps[0].off, err)
		}
	} else if f.cache != nil {
		// All of the call's pieces as one extent: one append of the data,
		// one journal record.
		if err := f.cache.putv(ps, buf, hold); err != nil {
			return 0, f.err("write", ps[0].off, err)
		}
		return int(total(ps)), nil
	}
	n := int64(0)
	if sieve(f.hints.dsWrite, ps) {
		win := make([]byte, min(f.hints.indWrBuffer, ps[len(ps)-1].off+ps[len(ps)-1].len-ps[0].off))
		for i := 0; i < len(ps); {
			lo := ps[i].off
			j := i
			for j < len(ps) && ps[j].off+ps[j].len <= lo+int64(len(win)) {
				j++
			}
			if j == i {
				var unlock func()
				if !locked {
					var err error
					if unlock, err = lockRange(f.fd, unix.F_WRLCK, ps[i].off, ps[i].off+ps[i].len); err != nil {
						return int(n), f.err("write", ps[i].off, err)
					}
				}
				_, err := pwriteFull(f.fd, buf[ps[i].buf:ps[i].buf+ps[i].len], ps[i].off)
				if unlock != nil {
					unlock()
				}
				if err != nil {
					return int(n), f.err("write", ps[i].off, err)
				}
				n += ps[i].len
				i++
				continue
			}
			end := ps[j-1].off + ps[j-1].len
			// Read-modify-write of the holes between pieces: lock the
			// range so other writers' bytes in the holes are not undone.
			var unlock func()
			if !locked {
				var err error
				if unlock, err = lockRange(f.fd, unix.F_WRLCK, lo, end); err != nil {
					return int(n), f.err("write", lo, err)
				}
			}
			w := win[:end-lo]
			got, err := preadFull(f.fd, w, lo)
			if err != nil && !errors.Is(err, io.EOF) {
				if unlock != nil {
					unlock()
				}
				return int(n), f.err("write", lo+int64(got), err)
			}
			clear(w[got:])
			for k := i; k < j; k++ {
				copy(w[ps[k].off-lo:], buf[ps[k].buf:ps[k].buf+ps[k].len])
			}
			_, err = pwriteFull(f.fd, w, lo)
			if unlock != nil {
				unlock()
			}
			if err != nil {
				return int(n), f.err("write", lo, err)
			}
			for k := i; k < j; k++ {
				n += ps[k].len
			}
			i = j
		}
		return int(n), nil
	}
	// Another rank's sieving read-modify-write may span these bytes: it
	// holds a lock on its span, so take one on each piece (unless sieving
	// is off on every rank, or atomic mode holds the whole span already).
	lockPieces := !locked && f.anySieve
	for _, p := range ps {
		var unlock func()
		if lockPieces {
			var err error
			if unlock, err = lockRange(f.fd, unix.F_WRLCK, p.off, p.off+p.len); err != nil {
				return int(n), f.err("write", p.off, err)
			}
		}
		got, err := pwriteFull(f.fd, buf[p.buf:p.buf+p.len], p.off)
		if unlock != nil {
			unlock()
		}
		n += int64(got)
		if err != nil {
			return int(n), f.err("write", p.off+int64(got), err)
		}
	}
	return int(n), nil
}

// preadFull reads len(b) bytes at off; short only at end of file (io.EOF).
func preadFull(fd *os.File, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := fd.ReadAt(b[n:], off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.EOF
		}
	}
	return n, nil
}

func pwriteFull(fd *os.File, b []byte, off int64) (int, error) {
	n, err := fd.WriteAt(b, off)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return n, err
}

// lockRange takes an open-file-description byte-range lock on [lo, hi),
// waiting for it. OFD locks belong to the descriptor, so ranks of one
// process (each with its own descriptor) exclude each other, and closing
// another descriptor of the file does not drop them.
func lockRange(fd *os.File, typ int16, lo, hi int64) (func(), error) {
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: lo, Len: hi - lo}
	for {
		err := unix.FcntlFlock(fd.Fd(), unix.F_OFD_SETLKW, &lk)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lock [%d, %d): %w", lo, hi, err)
		}
		break
	}
	return func() {
		ul := unix.Flock_t{Type: unix.F_UNLCK, Whence: io.SeekStart, Start: lo, Len: hi - lo}
		_ = unix.FcntlFlock(fd.Fd(), unix.F_OFD_SETLK, &ul)
	}, nil
}
